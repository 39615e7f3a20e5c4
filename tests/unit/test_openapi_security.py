"""The OpenAPI document's security follows the deployment: the function key everywhere it
is checked, and, where App Service authentication guards the API (``ApiTokenAudience``),
the Entra bearer token as well, on exactly the operations it guards (both, not either).
The anonymous operations stay anonymous."""

from __future__ import annotations

import json
from typing import Any

import azure.functions as func
import pytest

from shared.entrypoints.http.messages import ApiRequest
from shared.entrypoints.http.openapi import OpenApiEndpoint
from shared.inference.catalog import catalog_for
from shared.settings import Settings
from tests.support.functions import indexed_functions
from tests.unit.test_openapi import DEPLOYMENTS, HTTP_METHODS, document

CLIENT_ID = DEPLOYMENTS["azure"]["ApiTokenAudience"]
Requirements = list[dict[str, list[str]]]
KEY_ONLY: Requirements = [{"functionKey": []}, {"functionKeyQuery": []}]
KEY_AND_TOKEN: Requirements = [
    {"functionKey": [], "entraBearer": []},
    {"functionKeyQuery": [], "entraBearer": []},
]
FUNCTION_KEY_SCHEMES = {
    "functionKey": {"type": "apiKey", "in": "header", "name": "x-functions-key"},
    "functionKeyQuery": {"type": "apiKey", "in": "query", "name": "code"},
}
# The operations App Service authentication guards: every one of the request API.
GUARDED = (
    "list_requests",
    "submit_request",
    "get_request",
    "get_request_result",
    "cancel_request",
    "get_batch",
    "cancel_batch",
    "get_usage",
)
# The Event Grid webhook authenticates on its own (function key, secret, its own token).
WEBHOOK = ("event_webhook", "event_webhook_handshake")


def operations(doc: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """operationId -> (METHOD, path, operation)."""
    return {
        operation["operationId"]: (method.upper(), path, operation)
        for path, item in doc["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    }


def effective_security(doc: dict[str, Any]) -> dict[str, Requirements]:
    """operationId -> the security requirements that apply (its own, else the document's)."""
    return {
        operation_id: operation.get("security", doc["security"])
        for operation_id, (_, _, operation) in operations(doc).items()
    }


def without_security(node: Any) -> Any:
    """``node`` without any ``security`` or ``securitySchemes`` key, at any depth."""
    if isinstance(node, dict):
        return {
            key: without_security(value)
            for key, value in node.items()
            if key not in ("security", "securitySchemes")
        }
    if isinstance(node, list):
        return [without_security(item) for item in node]
    return node


def test_without_an_audience_the_document_declares_the_function_key_alone() -> None:
    doc = document()
    assert doc["components"]["securitySchemes"] == FUNCTION_KEY_SCHEMES
    assert doc["security"] == KEY_ONLY
    own = {
        operation_id: operation["security"]
        for operation_id, (_, _, operation) in operations(doc).items()
        if "security" in operation
    }
    assert own == {"openapi_document": []}, "only the anonymous document says its own"
    security = effective_security(doc)
    assert {operation_id: security[operation_id] for operation_id in GUARDED + WEBHOOK} == {
        operation_id: KEY_ONLY for operation_id in GUARDED + WEBHOOK
    }
    assert "entraBearer" not in json.dumps(doc)


def test_an_empty_audience_is_no_audience() -> None:
    assert Settings.model_validate({"ApiTokenAudience": " "}).site.api_token_audience is None
    assert document(ApiTokenAudience="") == document()


def test_with_an_audience_the_document_declares_the_entra_bearer_scheme() -> None:
    schemes = document(ApiTokenAudience=CLIENT_ID)["components"]["securitySchemes"]
    bearer = schemes.pop("entraBearer")
    assert schemes == FUNCTION_KEY_SCHEMES, "the function key is declared as before"
    assert {key: bearer[key] for key in ("type", "scheme", "bearerFormat")} == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
    }
    description = bearer["description"]
    assert f"audience `{CLIENT_ID}`" in description
    assert f"scope `{CLIENT_ID}/.default`" in description
    assert f"az account get-access-token --resource {CLIENT_ID} " in description
    assert "function key" in description, "it says the key is still needed"


def test_the_description_names_an_application_id_uri_as_given() -> None:
    bearer = document(ApiTokenAudience="api://inferbus-prod/")["components"]["securitySchemes"][
        "entraBearer"
    ]
    assert "audience `api://inferbus-prod/`" in bearer["description"]
    assert "scope `api://inferbus-prod/.default`" in bearer["description"]


def test_with_an_audience_every_guarded_operation_requires_the_key_and_the_token() -> None:
    doc = document(ApiTokenAudience=CLIENT_ID)
    assert doc["security"] == KEY_AND_TOKEN, "each requirement holds both: AND, not OR"
    security = effective_security(doc)
    assert {operation_id: security[operation_id] for operation_id in GUARDED} == {
        operation_id: KEY_AND_TOKEN for operation_id in GUARDED
    }


def test_with_an_audience_the_webhook_keeps_the_key_and_the_document_stays_anonymous() -> None:
    security = effective_security(document(ApiTokenAudience=CLIENT_ID))
    assert {operation_id: security[operation_id] for operation_id in WEBHOOK} == {
        operation_id: KEY_ONLY for operation_id in WEBHOOK
    }
    assert security["openapi_document"] == []


def test_the_audience_changes_nothing_but_security() -> None:
    local, azure = document(), document(ApiTokenAudience=CLIENT_ID)
    assert without_security(azure) == without_security(local)
    assert set(operations(azure)) == set(GUARDED + WEBHOOK + ("openapi_document",)), (
        "a new operation is classified here: guarded, webhook or anonymous"
    )


@pytest.mark.parametrize("deployment", DEPLOYMENTS)
def test_each_operation_asks_for_the_key_exactly_where_its_trigger_checks_one(
    deployment: str,
) -> None:
    """Anonymous triggers are anonymous operations; function-level ones take the key."""
    doc = document(**DEPLOYMENTS[deployment])
    prefix = doc["servers"][0]["url"]
    levels = {
        (str(method.value).upper(), f"/api/{binding.route}"): binding.auth_level
        for function in indexed_functions().values()
        for binding in function.get_bindings()
        if binding.type == "httpTrigger"
        for method in binding.methods
    }
    security = effective_security(doc)
    for operation_id, (method, path, _) in operations(doc).items():
        level = levels[(method, prefix + path)]
        requirements = security[operation_id]
        if level == func.AuthLevel.ANONYMOUS:
            assert requirements == [], operation_id
        else:
            assert level == func.AuthLevel.FUNCTION, operation_id
            assert all(
                {"functionKey", "functionKeyQuery"} & set(requirement)
                for requirement in requirements
            ), f"{operation_id}: every alternative needs the function key"


def test_the_endpoint_serves_the_variant_of_its_deployment() -> None:
    settings = Settings.model_validate({"AllowedModels": "local-analyzer"})
    media_types, catalog = settings.limits.allowed_upload_media_types, catalog_for(settings)
    request = ApiRequest("GET", "http://localhost:7071/api/openapi.json", {})
    local = json.loads(OpenApiEndpoint(media_types, catalog).serve(request).body)
    azure = json.loads(OpenApiEndpoint(media_types, catalog, CLIENT_ID).serve(request).body)
    assert local == document()
    assert azure == document(ApiTokenAudience=CLIENT_ID)
    assert "entraBearer" in azure["components"]["securitySchemes"]
