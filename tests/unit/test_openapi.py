"""The OpenAPI document: valid OpenAPI 3.1, exactly the routes the app registers, and the
schemas of what the handlers really accept and answer."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from azure_functions_runtime import handle_event
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from functions_host.protos import messages
from functions_host.worker.dispatcher import RuntimeRequest
from shared.entrypoints.http.openapi import openapi_document
from shared.inference.catalog import ModelCatalog, catalog_for
from shared.settings import Settings
from tests.support.catalogs import catalog

REPO_ROOT = Path(__file__).resolve().parents[2]
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}
# The human-readable page of this document and its files (shared/entrypoints/http/docs): they render
# the API, they are not part of it.
UNDOCUMENTED = {("GET", "/api/docs"), ("GET", "/api/docs/{asset}")}
TEXT = {"model": "local-analyzer", "input": {"text": "Invoice 12: 300 EUR due."}}


def _call(verb: Any, **content: Any) -> Any:
    request = messages.StreamingMessage(request_id="openapi", **content)
    return asyncio.run(verb(RuntimeRequest(request, {"protos": messages, "host": "127.0.0.1"})))


def _is_app_module(name: str) -> bool:
    return name in ("function_app", "triggers") or name.startswith("triggers.")


@pytest.fixture(scope="module")
def registered_routes() -> Iterator[set[tuple[str, str]]]:
    """(METHOD, /api/<route>) of every HTTP trigger, as the Python runtime indexes the app
    (from a fresh import: other tests may have indexed function_app already)."""
    saved = {name: sys.modules.pop(name) for name in list(sys.modules) if _is_app_module(name)}
    try:
        init = _call(
            handle_event.worker_init_request,
            worker_init_request=messages.WorkerInitRequest(function_app_directory=str(REPO_ROOT)),
        )
        assert init.result.status == messages.StatusResult.Success, init.result.exception.message
        metadata = _call(
            handle_event.functions_metadata_request,
            functions_metadata_request=messages.FunctionsMetadataRequest(),
        )
        prefix = json.loads((REPO_ROOT / "host.json").read_text())["extensions"]["http"][
            "routePrefix"
        ]
        routes: set[tuple[str, str]] = set()
        for function in metadata.function_metadata_results:
            for raw in function.raw_bindings:
                binding = json.loads(raw)
                if binding["type"] == "httpTrigger":
                    path = f"/{prefix}/{binding['route']}"
                    routes.update((method.upper(), path) for method in binding["methods"])
        yield routes
    finally:
        for name in [name for name in sys.modules if _is_app_module(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


def document(models: ModelCatalog | None = None, /, **values: str) -> dict[str, Any]:
    """The document of a deployment with these app settings, built from them as the
    bootstrap builds the endpoint (ApiTokenAudience: behind App Service authentication)."""
    settings = Settings.model_validate({"AllowedModels": "local-analyzer", **values})
    return openapi_document(
        settings.limits.allowed_upload_media_types,
        models or catalog_for(settings),
        settings.site.api_token_audience,
    )


# The document locally, and in Azure behind App Service authentication (the API's client id).
DEPLOYMENTS: dict[str, dict[str, str]] = {
    "local": {},
    "azure": {"ApiTokenAudience": "11111111-2222-3333-4444-555555555555"},
}


SENTIMENT_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["sentiment"],
    "properties": {"sentiment": {"$ref": "#/$defs/polarity"}},
    "$defs": {"polarity": {"enum": ["positive", "negative"]}},
}
MIXED = catalog(
    {
        "tasks": {"sentiment": {"instructions": "Rate it.", "output_schema": SENTIMENT_SCHEMA}},
        "models": {
            "local-analyzer": {"provider": "local"},
            "rater": {
                "provider": "openai_compatible",
                "task": "sentiment",
                "deployment": "llama3",
                "endpoint": "http://127.0.0.1:1/v1",
                "parameters": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"scale": {"enum": ["1-5", "1-10"]}},
                },
            },
        },
    }
)


def validator_for(doc: dict[str, Any], name: str) -> jsonschema_rs.Validator:
    """A validator of one component schema, its references resolved inside ``doc``."""
    root = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    return jsonschema_rs.Draft202012Validator(root)


@pytest.mark.parametrize("deployment", DEPLOYMENTS)
def test_the_document_is_valid_openapi_3_1_with_valid_schemas(deployment: str) -> None:
    doc = document(**DEPLOYMENTS[deployment])
    errors = [
        f"{'/'.join(map(str, e.instance_path))}: {e.message}"
        for e in OPENAPI_31_VALIDATOR.iter_errors(doc)
    ]
    assert errors == []
    assert doc["openapi"].startswith("3.1")
    for name, schema in doc["components"]["schemas"].items():
        assert jsonschema_rs.meta.is_valid(schema), name
        validator_for(doc, name)  # every $ref resolves


def test_the_document_lists_exactly_the_registered_routes(
    registered_routes: set[tuple[str, str]],
) -> None:
    doc = document()
    base = doc["servers"][0]["url"]
    documented = {
        (method.upper(), base + path)
        for path, item in doc["paths"].items()
        for method in item
        if method in HTTP_METHODS
    }
    assert UNDOCUMENTED.issubset(registered_routes), "the docs routes are registered"
    assert documented == registered_routes - UNDOCUMENTED
    assert ("GET", "/api/openapi.json") in registered_routes


def test_every_error_is_problem_json_and_submit_lists_the_documented_statuses() -> None:
    doc = document()
    submit = doc["paths"]["/v1/requests"]["post"]["responses"]
    assert {"202", "400", "401", "403", "409", "413", "415", "422", "429", "503"} <= set(submit)
    assert set(submit["202"]["headers"]) == {"Location", "Retry-After"}
    job = doc["paths"]["/v1/requests/{id}"]
    assert {"404", "410"} <= set(job["get"]["responses"])
    for item in doc["paths"].values():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert list(response["content"]) == ["application/problem+json"]


def test_submit_says_its_403_includes_a_model_the_tenant_may_not_use() -> None:
    doc = document()
    submit = doc["paths"]["/v1/requests"]["post"]["responses"]
    job = doc["paths"]["/v1/requests/{id}"]["get"]["responses"]

    assert "model-not-allowed" in submit["403"]["description"]
    assert "model-not-allowed" not in job["403"]["description"], "only intake refuses a model"


def test_the_models_and_their_parameters_follow_the_deployment() -> None:
    local = document(AllowedModels="local-analyzer,other")
    body = local["components"]["schemas"]["SubmitRequestBody"]
    assert body["properties"]["model"]["enum"] == ["local-analyzer", "other"]
    assert body["properties"]["parameters"]["$ref"].endswith("/GenerationParameters")
    assert "allOf" not in body, "one declaration for every alias needs no condition"
    assert local["x-model-parameters"] == {
        "local-analyzer": {"$ref": "#/components/schemas/GenerationParameters"},
        "other": {"$ref": "#/components/schemas/GenerationParameters"},
    }
    parameters = local["components"]["schemas"]["GenerationParameters"]
    assert parameters["additionalProperties"] is False
    assert parameters["properties"]["summary_sentences"]["maximum"] == 10
    assert "simulate" not in parameters["properties"]
    assert local["x-task-results"] == {
        "document-analysis": {"$ref": "#/components/schemas/InferenceResult"}
    }


def test_each_alias_documents_its_parameters_and_each_task_its_result() -> None:
    doc = document(MIXED)
    errors = [str(e) for e in OPENAPI_31_VALIDATOR.iter_errors(doc)]
    assert errors == []
    schemas = doc["components"]["schemas"]
    assert doc["x-model-parameters"]["rater"] == {"$ref": "#/components/schemas/rater.parameters"}
    assert doc["x-model-tasks"] == {"local-analyzer": "document-analysis", "rater": "sentiment"}
    assert doc["x-task-results"]["sentiment"] == {"$ref": "#/components/schemas/sentiment.result"}
    submit = validator_for(doc, "SubmitRequestBody")
    text = {"input": {"text": "x"}}
    assert submit.is_valid({**text, "model": "rater", "parameters": {"scale": "1-5"}})
    assert not submit.is_valid({**text, "model": "rater", "parameters": {"summary_sentences": 2}})
    assert submit.is_valid(
        {**text, "model": "local-analyzer", "parameters": {"summary_sentences": 2}}
    )
    assert not submit.is_valid({**text, "model": "local-analyzer", "parameters": {"scale": "1-5"}})
    result = validator_for(doc, "ResultDocument")
    ids = {"request_id": "r", "tenant_id": "t", "outcome": "completed", "completed_at": "now"}
    assert result.is_valid({**ids, "model": "rater", "task": "sentiment",
                            "result": {"sentiment": "positive"}})  # fmt: skip
    assert not result.is_valid({**ids, "model": "rater", "task": "sentiment",
                                "result": {"sentiment": "meh"}})  # fmt: skip
    assert schemas["sentiment.result"]["properties"]["sentiment"] == {
        "$ref": "#/components/schemas/sentiment.result/$defs/polarity"
    }, "its own references point inside it"


def test_a_result_documents_its_cost_as_a_number_in_a_currency() -> None:
    doc = document()
    result = validator_for(doc, "ResultDocument")
    fields = {"request_id": "r", "tenant_id": "t", "model": "local-analyzer",
              "outcome": "refused", "completed_at": "now"}  # fmt: skip
    assert result.is_valid({**fields, "cost": {"amount": 4.5e-05, "currency": "USD"}})
    assert result.is_valid({**fields, "cost": None})
    assert result.is_valid(fields), "a result stored before costs were kept"
    assert not result.is_valid({**fields, "cost": {"amount": "0.1", "currency": "USD"}})
    assert not result.is_valid({**fields, "cost": {"amount": -1, "currency": "USD"}})
    assert not result.is_valid({**fields, "cost": {"amount": 1, "currency": "dollars"}})
