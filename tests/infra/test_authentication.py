"""App Service authentication guards the request API (the tenant comes from its principal)."""

from __future__ import annotations

import json

from shared.entrypoints.http.docs.assets import INITIALIZER, VENDORED
from tests.infra import (
    INFRA,
    MODULES,
    has_default,
    modules,
    params,
    resource_body,
    resources_of_type,
)
from tests.support.functions import indexed_functions

MODULE = MODULES / "app-authentication.bicep"
REPO = INFRA.parent


def auth_settings() -> dict[str, object]:
    (body,) = [
        resource_body(r)
        for r in resources_of_type(MODULE, "Microsoft.Web/sites/config").values()
        if resource_body(r).get("name") == "authsettingsV2"
    ]
    properties = body["properties"]
    assert isinstance(properties, dict)
    return properties


def test_anonymous_callers_are_refused_before_the_app_runs() -> None:
    validation = auth_settings()["globalValidation"]
    assert validation["requireAuthentication"] is True  # type: ignore[index]
    assert validation["unauthenticatedClientAction"] == "Return401"  # type: ignore[index]
    entra = auth_settings()["identityProviders"]["azureActiveDirectory"]  # type: ignore[index]
    assert entra["enabled"] is True


def test_exactly_the_event_grid_webhooks_and_the_openapi_document_are_excluded() -> None:
    """Also the document's page and each of its files (Easy Auth matches whole paths)."""
    excluded = params(MODULE)["excludedPaths"]["default"]
    route_prefix = json.loads((REPO / "host.json").read_text())["extensions"]["http"]["routePrefix"]
    routes = {
        f"/{route_prefix}/{binding.route}"
        for function in indexed_functions().values()
        for binding in function.get_bindings()
        if binding.type == "httpTrigger"
        and function.get_function_name() in {"event_webhook", "openapi_document"}
    }
    assert routes == {"/api/v1/events", "/api/openapi.json"}
    page = {"/api/docs"} | {f"/api/docs/{name}" for name in (*VENDORED, INITIALIZER)}
    assert set(excluded) == {"/runtime/webhooks/blobs", "/runtime/webhooks/eventgrid"} | (
        routes | page
    )


def test_main_requires_the_api_app_registration() -> None:
    main = INFRA / "main.bicep"
    assert not has_default(params(main)["apiClientId"]), (
        "deploying without authentication must be impossible"
    )
    authentication = modules(main)["authentication"]
    assert authentication["detail"]["path"] == "modules/app-authentication.bicep"
    assert "condition" not in authentication["config"], "authentication is always deployed"
