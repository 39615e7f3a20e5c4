"""WebhookTenants: a webhook credential creates work only for its own tenants."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from shared.entrypoints.http.messages import ApiResponse
from shared.errors import ConfigurationError, Forbidden, Unauthenticated
from shared.events.webhook_tenancy import (
    UNRESTRICTED,
    TenantScope,
    parse_webhook_tenants,
    running_in_azure,
)
from tests.support.events import blob_created_event, requested_event
from tests.support.wiring import Wired, api_request, wire

CRM_SECRET, OPS_SECRET = "crm-delivery-secret", "ops-delivery-secret"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


SETTING = f" {digest(CRM_SECRET)}=contoso|fabrikam ; {digest(OPS_SECRET).upper()}=* ;"


def test_the_setting_parses_into_scopes_by_secret_hash() -> None:
    tenancy = parse_webhook_tenants(SETTING)
    crm = tenancy.scope_for({"x-webhook-secret": CRM_SECRET})
    assert crm == TenantScope(frozenset({"contoso", "fabrikam"}))
    assert crm.allows("contoso")
    assert not crm.allows("northwind")
    assert tenancy.scope_for({"x-webhook-secret": OPS_SECRET}) == UNRESTRICTED
    assert CRM_SECRET not in SETTING


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("contoso", "must be"),
        ("abc=contoso", "must be"),
        (f"{digest('x')}=", "names no valid tenants"),
        (f"{digest('x')}=con toso", "con toso"),
        (f"{digest('x')}=a;{digest('x')}=b", "twice"),
    ],
)
def test_a_malformed_setting_is_a_configuration_error_naming_the_entry(
    value: str, words: str
) -> None:
    with pytest.raises(ConfigurationError, match=words):
        parse_webhook_tenants(value)


def test_deliveries_need_a_known_secret_when_the_setting_is_set() -> None:
    tenancy = parse_webhook_tenants(SETTING)
    with pytest.raises(Unauthenticated, match="lacks the x-webhook-secret header"):
        tenancy.scope_for({})
    with pytest.raises(Forbidden):
        tenancy.scope_for({"x-webhook-secret": "guessed"})


def test_empty_means_unlimited_locally_and_is_refused_in_azure() -> None:
    assert parse_webhook_tenants("").scope_for({}) == UNRESTRICTED
    assert parse_webhook_tenants(None, in_azure=False).scope_for({}) == UNRESTRICTED
    unconfigured = parse_webhook_tenants(" ; ", in_azure=True).scope_for({})
    with pytest.raises(ConfigurationError, match="in Azure the events webhook creates work only"):
        unconfigured.allows("contoso")
    assert running_in_azure({"WEBSITE_INSTANCE_ID": "abc"})
    assert running_in_azure({"WEBSITE_SITE_NAME": "inferbus-app"})
    assert not running_in_azure({"WEBSITE_SITE_NAME": ""})


# --- through the webhook ------------------------------------------------------------------


def deliver(wired: Wired, payload: Any, secret: str | None = None) -> ApiResponse:
    headers = {"content-type": "application/cloudevents+json"}
    if secret is not None:
        headers["x-webhook-secret"] = secret
    request = api_request("POST", "/v1/events", body=json.dumps(payload).encode(), headers=headers)
    return wired.call(wired.http.webhook.handle, request)


def test_an_event_for_another_tenant_is_rejected_and_makes_no_job() -> None:
    wired = wire(WebhookTenants=SETTING)
    refused = deliver(wired, requested_event("northwind", "ev-n"), CRM_SECRET)
    assert refused.status == 400
    problem = json.loads(refused.body)
    (error,) = problem["errors"]
    assert error["field"] == "event ev-n"
    assert "tenant 'northwind' is not one this webhook credential may submit" in error["message"]
    assert wired.queue.sent == []

    assert deliver(wired, requested_event("contoso"), CRM_SECRET).status == 202
    assert deliver(wired, requested_event("northwind"), OPS_SECRET).status == 202
    assert deliver(wired, requested_event("contoso")).status == 401
    assert deliver(wired, requested_event("contoso"), "guessed").status == 403
    assert len(wired.queue.sent) == 2


def test_a_blob_event_is_held_to_the_tenant_of_its_path() -> None:
    wired = wire(WebhookTenants=SETTING)
    wired.blobs.upload("incoming", "northwind/a.txt", b"a letter", "text/plain", {})
    event = blob_created_event(wired.blobs, "incoming", "northwind/a.txt")
    request = api_request(
        "POST",
        "/v1/events",
        body=json.dumps([event]).encode(),
        headers={"content-type": "application/json", "x-webhook-secret": CRM_SECRET},
    )
    response = wired.call(wired.http.webhook.handle, request)
    assert response.status == 400
    assert "northwind" in response.body.decode()
    assert wired.queue.sent == []


def test_in_azure_an_unset_setting_answers_500_and_makes_no_job(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WEBSITE_INSTANCE_ID", "0123")
    wired = wire()
    response = deliver(wired, requested_event("contoso"), "any")
    assert response.status == 500
    assert json.loads(response.body)["type"].endswith("configuration-error")
    assert wired.queue.sent == []
    # The app's own result notifications create no work: still taken.
    notification = {
        **requested_event("contoso", "ev-done"),
        "type": "com.inferbus.InferenceCompleted",
    }
    assert deliver(wired, notification).status == 200
    monkeypatch.delenv("WEBSITE_INSTANCE_ID")
    assert deliver(wired, requested_event("contoso")).status == 202
