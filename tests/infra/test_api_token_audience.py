"""ApiTokenAudience: the Function App tells the app the audience App Service
authentication requires, and the OpenAPI document asks for the Entra token on exactly the
paths App Service authentication guards."""

from __future__ import annotations

from tests.infra import (
    FUNCTION_APP,
    MAIN,
    MODULES,
    app_settings,
    decorator,
    is_reference,
    module,
    params,
    render,
)
from tests.unit.test_openapi import HTTP_METHODS, document

AUTHENTICATION = MODULES / "app-authentication.bicep"


def test_the_app_setting_comes_from_the_function_app_parameter() -> None:
    assert is_reference(app_settings()["ApiTokenAudience"], "apiTokenAudience")
    parameter = params(FUNCTION_APP)["apiTokenAudience"]
    assert parameter["default"] == "", "empty: the document declares the function key alone"
    assert decorator(parameter, "description"), "the parameter says what it is"


def test_the_document_asks_for_the_token_exactly_where_app_service_authentication_does() -> None:
    """Easy Auth matches whole paths: a documented operation on an excluded path takes
    no Entra token, every other one does (both with the function key, where it has one)."""
    excluded = set(params(AUTHENTICATION)["excludedPaths"]["default"])
    doc = document(ApiTokenAudience="11111111-2222-3333-4444-555555555555")
    prefix = doc["servers"][0]["url"]
    guarded: set[tuple[str, str, bool]] = set()
    unguarded: set[tuple[str, str, bool]] = set()
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            requirements = operation.get("security", doc["security"])
            asks_for_token = any("entraBearer" in r for r in requirements)
            (unguarded if prefix + path in excluded else guarded).add(
                (method, path, asks_for_token)
            )
    assert guarded, "the request API is guarded"
    assert unguarded, "the webhook and the document are not"
    assert all(asks for _, _, asks in guarded), sorted(guarded)
    assert not any(asks for _, _, asks in unguarded), sorted(unguarded)


def test_main_passes_the_api_audience_the_authentication_accepts() -> None:
    """The audience the document names is the one App Service authentication is given:
    the client id, or the first of the accepted audiences when those are set."""
    given = module(MAIN, "functionApp")["params"]
    assert render(given["apiTokenAudience"]) == (
        "(empty(apiAudiences) ? apiClientId : apiAudiences[0])"
    )
