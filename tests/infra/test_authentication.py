"""App Service authentication guards the request API (the tenant comes from its principal)."""

from __future__ import annotations

import json

from tests.infra import INFRA, MODULES, params, read, resources_of_type
from tests.support.functions import indexed_functions

MODULE = MODULES / "app-authentication.bicep"
REPO = INFRA.parent


def auth_settings() -> dict[str, object]:
    (resource,) = [
        r
        for r in resources_of_type(read(MODULE), "Microsoft.Web/sites/config")
        if r.body.get("name") == "authsettingsV2"
    ]
    properties = resource.body["properties"]
    assert isinstance(properties, dict)
    return properties


def test_anonymous_callers_are_refused_before_the_app_runs() -> None:
    validation = auth_settings()["globalValidation"]
    assert validation["requireAuthentication"] is True  # type: ignore[index]
    assert validation["unauthenticatedClientAction"] == "Return401"  # type: ignore[index]
    entra = auth_settings()["identityProviders"]["azureActiveDirectory"]  # type: ignore[index]
    assert entra["enabled"] is True


def test_exactly_the_event_grid_webhooks_are_excluded() -> None:
    excluded = params(read(MODULE))["excludedPaths"].default
    route_prefix = json.loads((REPO / "host.json").read_text())["extensions"]["http"]["routePrefix"]
    routes = {
        f"/{route_prefix}/{binding.route}"
        for function in indexed_functions().values()
        for binding in function.get_bindings()
        if binding.type == "httpTrigger" and function.get_function_name() == "event_webhook"
    }
    assert routes == {"/api/v1/events"}
    assert set(excluded) == {"/runtime/webhooks/blobs", "/runtime/webhooks/eventgrid"} | routes


def test_main_requires_the_api_app_registration() -> None:
    main = params(read(INFRA / "main.bicep"))
    assert not main["apiClientId"].has_default, (
        "deploying without authentication must be impossible"
    )
    assert "module authentication 'modules/app-authentication.bicep'" in read(INFRA / "main.bicep")
