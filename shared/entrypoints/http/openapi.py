"""The OpenAPI 3.1 document of the HTTP API, generated from the pydantic contracts.

One source of truth: every request and response body is the JSON Schema of the model the
code validates or answers with (``model_json_schema`` via ``models_json_schema``, with
``ref_template`` pointing into ``#/components/schemas``), and the document reflects this
deployment's catalog: the aliases it serves, the parameters each takes and the result of
each task (``shared.inference.catalog``). ``GET /api/openapi.json`` serves it
(anonymous: it holds no secret and callers need it before they have a key). A test keeps
its paths equal to the routes the HTTP triggers register, and another runs schemathesis
against the live app with it.

Security follows the deployment too. Every keyed operation takes the function key
(``x-functions-key`` or ``?code=``). Where App Service authentication guards the API (in
Azure: ``ApiTokenAudience``, the audience of the Entra tokens it requires), each operation
it guards requires an Entra bearer token as well (``entraBearer``, in the same security
requirement: both, not either); the Event Grid webhook, which it leaves to authenticate on
its own, keeps the function key alone, and the document itself stays anonymous.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from shared.contracts import (
    DOCUMENT_ANALYSIS,
    TENANT_ID_PATTERN,
    AcceptedRequest,
    BatchView,
    JobStatus,
    JobView,
    ProblemDetails,
    RequestList,
    ResultDocument,
    SubmitRequestBody,
    UsageView,
)
from shared.entrypoints.http.listing import MODEL_PATTERN
from shared.entrypoints.http.messages import ApiRequest, ApiResponse, json_response
from shared.entrypoints.http.problems import PROBLEM_CONTENT_TYPE
from shared.entrypoints.http.webhook import DeliveryReport
from shared.events.incoming import CloudEventDocument, EventGridEventDocument, ValidationResponse
from shared.events.intake import InferenceRequestedData
from shared.inference.catalog import ModelCatalog
from shared.inference.parameters import GenerationParameters, SamplingParameters

OPENAPI_VERSION: Final = "3.1.0"
API_VERSION: Final = "1.0.0"
SCHEMAS: Final = "#/components/schemas/"

# The security schemes: the function key (header or query) and, where App Service
# authentication guards the API, the Entra bearer token it requires.
FUNCTION_KEY: Final = "functionKey"
FUNCTION_KEY_QUERY: Final = "functionKeyQuery"
ENTRA_BEARER: Final = "entraBearer"

_MODELS: Final[tuple[tuple[type[BaseModel], JsonSchemaMode], ...]] = (
    (SubmitRequestBody, "validation"),
    (AcceptedRequest, "serialization"),
    (JobView, "serialization"),
    (RequestList, "serialization"),
    (BatchView, "serialization"),
    (UsageView, "serialization"),
    (ResultDocument, "serialization"),
    (ProblemDetails, "serialization"),
    (CloudEventDocument, "validation"),
    (EventGridEventDocument, "validation"),
    (InferenceRequestedData, "validation"),
    (ValidationResponse, "serialization"),
    (DeliveryReport, "serialization"),
    (GenerationParameters, "validation"),
    (SamplingParameters, "validation"),
)

# Why each error status can happen; every one is problem+json.
_ERRORS: Final = {
    "400": "Invalid request: malformed or too deeply nested JSON, a field breaking its rule",
    "401": "No caller identity (App Service authentication, or X-Tenant-Id where allowed)",
    "403": "The credentials do not grant this",
    "404": "No such request for this tenant",
    "409": "The request's state does not allow this now (Retry-After when waiting helps)",
    "410": "The request was retired by the retention policy (JobRetentionDays)",
    "413": "Too large: the body, the inline text, or parameters beyond their byte limit",
    "415": "Content-Type not accepted",
    "422": "Unknown model, or parameters that break the model's declaration",
    "429": "The tenant's budget is spent until the period in Retry-After resets "
    "(budget-exceeded), or throttled by the platform or a gateway in front of the app",
    "500": "The deployment is misconfigured (for example WebhookTenants unset in Azure)",
    "503": "A dependency is unavailable or the backlog is full: retry after Retry-After",
}


def _component_schemas() -> dict[str, Any]:
    _, definitions = models_json_schema(_MODELS, ref_template=SCHEMAS + "{model}")
    schemas: dict[str, Any] = definitions.get("$defs", {})
    return schemas


def _ref(name: str) -> dict[str, str]:
    return {"$ref": SCHEMAS + name}


# What a submission may also be refused with, beside the refusals every operation shares.
_SUBMIT_ERRORS: Final = {
    "403": "The credentials do not grant this, or the tenant catalog does not let the "
    "tenant use the model (model-not-allowed)",
}


def _errors(*statuses: str, described: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The problem+json responses of ``statuses``; ``described``: an operation's own
    description of some of them."""
    content = {PROBLEM_CONTENT_TYPE: {"schema": _ref("ProblemDetails")}}
    responses: dict[str, Any] = {}
    for status in statuses:
        description = (described or {}).get(status, _ERRORS[status])
        response: dict[str, Any] = {"description": description, "content": content}
        if status in ("409", "429", "503"):
            response["headers"] = {"Retry-After": {"$ref": "#/components/headers/RetryAfter"}}
        responses[status] = response
    return responses


def _header(name: str, description: str, **schema: Any) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": False,
        "description": description,
        "schema": {"type": "string", **schema},
    }


_TENANT = _header(
    "X-Tenant-Id",
    "Development stacks only (AllowTenantHeader): the caller's tenant. In Azure the tenant "
    "comes from App Service authentication (x-ms-client-principal).",
    pattern=TENANT_ID_PATTERN.pattern,
)
_JOB_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}
_JOB_ERRORS = ("400", "401", "403", "404", "410", "429", "503")


def _request_paths(upload_media_types: tuple[str, ...], catalog: ModelCatalog) -> dict[str, Any]:
    json_body = {"schema": _ref("SubmitRequestBody")}
    upload = {"schema": {"type": "string", "format": "binary"}}
    content: dict[str, Any] = {"application/json": json_body}
    content.update({t: upload for t in upload_media_types if t not in content})
    query = [
        {
            "name": "model",
            "in": "query",
            "required": False,
            "schema": {"enum": list(catalog.aliases)},
            "description": "Raw uploads only: the model to run.",
        },
        {"name": "priority", "in": "query", "required": False, "schema": _ref("Priority")},
        {
            "name": "not_before",
            "in": "query",
            "required": False,
            "schema": {"type": "string", "format": "date-time"},
        },
        {
            "name": "deadline_seconds",
            "in": "query",
            "required": False,
            "schema": {"type": "integer", "minimum": 1},
        },
        {
            "name": "mode",
            "in": "query",
            "required": False,
            "schema": _ref("RequestedMode"),
            "description": "Raw uploads only: queue (default), batch (the Global Batch lane), "
            "or auto (the queue lane, unless its expected wait passes the deadline and the "
            "model has a batch deployment).",
        },
    ]
    return {
        "/v1/requests": {
            "get": _list_operation(),
            "post": _submit_operation(content, query),
        },
        **_job_paths(),
    }


def _list_operation() -> dict[str, Any]:
    """``GET /v1/requests``: the caller's requests, newest first (``http.listing``)."""
    statuses = ", ".join(status.value for status in JobStatus)
    parameters = [
        _TENANT,
        _query(
            "status",
            {"type": "string"},
            f"Only requests in these statuses, comma-separated ({statuses}).",
        ),
        _query(
            "model",
            {"type": "string", "pattern": MODEL_PATTERN},
            "Only requests for this model alias (one the catalog serves now, or served then).",
        ),
        _query(
            "limit",
            {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
            "At most this many requests.",
        ),
        _query(
            "continuation",
            {"type": "string"},
            "The previous page's continuation: the page after it (same filters, same tenant).",
        ),
    ]
    operation = _operation(
        "list_requests",
        "The caller's requests, newest first, a page at a time",
        ("200", "A page of requests (continuation and next while more may follow)", "RequestList"),
        ("400", "401", "403", "429", "503"),
    )
    return {**operation, "parameters": parameters}


def _query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "schema": schema,
        "description": description,
    }


def _submit_operation(content: dict[str, Any], query: list[dict[str, Any]]) -> dict[str, Any]:
    accepted_headers = {
        "Location": {"description": "The status URL to poll", "schema": {"type": "string"}},
        "Retry-After": {"$ref": "#/components/headers/RetryAfter"},
    }
    return {
        "operationId": "submit_request",
        "summary": "Submit work: a JSON body, or a raw document with ?model=",
        "parameters": [
            _TENANT,
            _header("Idempotency-Key", "Replays the same job", maxLength=128),
            *query,
        ],
        "requestBody": {"required": True, "content": content},
        "responses": {
            "202": {
                "description": "Accepted: poll Location",
                "headers": accepted_headers,
                "content": {"application/json": {"schema": _ref("AcceptedRequest")}},
            },
            **_errors(
                "400",
                "401",
                "403",
                "409",
                "413",
                "415",
                "422",
                "429",
                "503",
                described=_SUBMIT_ERRORS,
            ),
        },
    }


def _job_paths() -> dict[str, Any]:
    return {
        "/v1/requests/{id}": {
            "parameters": [_JOB_ID, _TENANT],
            "get": _operation(
                "get_request",
                "The request's job (Retry-After until it is terminal)",
                ("200", "The job", "JobView"),
                _JOB_ERRORS,
            ),
            "delete": _operation(
                "cancel_request",
                "Cancel the request unless it has ended",
                ("200", "Cancelled", "JobView"),
                (*_JOB_ERRORS, "409"),
            ),
        },
        "/v1/requests/{id}/result": {
            "parameters": [_JOB_ID, _TENANT],
            "get": _operation(
                "get_request_result",
                "The result of a completed request (409 until it is ready)",
                ("200", "The result", "ResultDocument"),
                (*_JOB_ERRORS, "409"),
            ),
        },
    }


def _operation(
    operation_id: str, summary: str, answer: tuple[str, str, str], errors: tuple[str, ...]
) -> dict[str, Any]:
    """An operation that answers one JSON document (``answer``: status, description,
    schema) or one of ``errors``."""
    status, description, schema = answer
    content = {"application/json": {"schema": _ref(schema)}}
    return {
        "operationId": operation_id,
        "summary": summary,
        "responses": {
            status: {"description": description, "content": content},
            **_errors(*errors),
        },
    }


def _batch_paths() -> dict[str, Any]:
    errors = ("400", "401", "403", "404", "429", "503")
    return {
        "/v1/batches/{id}": {
            "parameters": [_JOB_ID, _TENANT],
            "get": _operation(
                "get_batch",
                "A tenant's Global Batch submission (a request's batch.submission_id)",
                ("200", "The batch", "BatchView"),
                errors,
            ),
            "delete": _operation(
                "cancel_batch",
                "Cancel a Global Batch submission and every request in it",
                ("202", "Cancellation under way", "BatchView"),
                (*errors, "409"),
            ),
        },
    }


def _usage_paths() -> dict[str, Any]:
    month = {
        "name": "month",
        "in": "query",
        "required": False,
        "description": "A UTC month, YYYY-MM (the current one by default)",
        "schema": {"type": "string", "pattern": "^[0-9]{4}-(0[1-9]|1[0-2])$"},
    }
    return {
        "/v1/usage": {
            "parameters": [_TENANT, month],
            "get": _operation(
                "get_usage",
                "The caller's tokens, cost and budgets for a UTC month",
                ("200", "The tenant's usage", "UsageView"),
                ("400", "401", "403", "429", "503"),
            ),
        },
    }


def _function_key() -> list[dict[str, list[str]]]:
    """Either form of the function key (OpenAPI security requirements: one of them)."""
    return [{FUNCTION_KEY: []}, {FUNCTION_KEY_QUERY: []}]


def _security_schemes(entra_audience: str | None) -> dict[str, Any]:
    schemes: dict[str, Any] = {
        FUNCTION_KEY: {"type": "apiKey", "in": "header", "name": "x-functions-key"},
        FUNCTION_KEY_QUERY: {"type": "apiKey", "in": "query", "name": "code"},
    }
    if entra_audience:
        schemes[ENTRA_BEARER] = _entra_bearer(entra_audience)
    return schemes


def _entra_bearer(audience: str) -> dict[str, Any]:
    """The Entra access token App Service authentication requires, for ``audience``."""
    scope = audience.rstrip("/") + "/.default"
    return {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": f"A Microsoft Entra ID access token for the API, audience `{audience}` "
        f"(scope `{scope}`), sent as `Authorization: Bearer <token>` together with the "
        "function key: App Service authentication validates it before the app runs, and "
        "its tenant claim (tid) is the caller's tenant. For example: `az account "
        f"get-access-token --resource {audience} --query accessToken -o tsv`.",
    }


def _global_security(entra_audience: str | None) -> list[dict[str, list[str]]]:
    """The operations' default: the function key and, where App Service authentication
    guards the API, the Entra token as well (both in each requirement: AND)."""
    if not entra_audience:
        return _function_key()
    return [{**requirement, ENTRA_BEARER: []} for requirement in _function_key()]


def _event_paths(entra_audience: str | None) -> dict[str, Any]:
    cloud_event, eventgrid_event = _ref("CloudEventDocument"), _ref("EventGridEventDocument")
    batch = {"type": "array", "items": cloud_event, "minItems": 1}
    report = {"application/json": {"schema": _ref("DeliveryReport")}}
    # App Service authentication excludes the webhook, which authenticates Event Grid on
    # its own (infra/modules/app-authentication.bicep, excludedPaths): where the API
    # requires an Entra token, the webhook says it takes the function key alone.
    webhook_security = {"security": _function_key()} if entra_audience else {}
    return {
        "/v1/events": {
            "post": {
                "operationId": "event_webhook",
                "summary": "Event Grid push deliveries (both schemas) and the validation handshake",
                "description": "InferenceRequested data: "
                + SCHEMAS
                + "InferenceRequestedData. Events are accepted only for the tenants of the "
                "delivery's X-Webhook-Secret (WebhookTenants).",
                **webhook_security,
                "parameters": [
                    _header("aeg-event-type", "SubscriptionValidation or Notification"),
                    _header("X-Webhook-Secret", "The delivery secret (WebhookTenants)"),
                ],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "oneOf": [
                                    {"type": "array", "items": eventgrid_event, "minItems": 1},
                                    batch,
                                    cloud_event,
                                ]
                            }
                        },
                        "application/cloudevents+json": {"schema": cloud_event},
                        "application/cloudevents-batch+json": {"schema": batch},
                    },
                },
                "responses": {
                    "200": {
                        "description": "Validated, or delivered with nothing to do",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "oneOf": [_ref("ValidationResponse"), _ref("DeliveryReport")]
                                }
                            }
                        },
                    },
                    "202": {"description": "Delivered: work accepted", "content": report},
                    **_errors("400", "401", "403", "413", "429", "500", "503"),
                },
            },
            "options": {
                "operationId": "event_webhook_handshake",
                "summary": "The CloudEvents abuse-protection handshake",
                **webhook_security,
                "parameters": [
                    {**_header("WebHook-Request-Origin", "The origin to allow"), "required": True}
                ],
                "responses": {
                    "200": {
                        "description": "Allowed",
                        "headers": {
                            "WebHook-Allowed-Origin": {"schema": {"type": "string"}},
                            "WebHook-Allowed-Rate": {"schema": {"type": "string"}},
                        },
                    },
                    **_errors("400", "429"),
                },
            },
        },
        "/openapi.json": {
            "get": {
                "operationId": "openapi_document",
                "summary": "This document",
                "security": [],
                "responses": {
                    "200": {
                        "description": "The OpenAPI document",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    },
                    **_errors("429"),
                },
            }
        },
    }


def _component(schema: Mapping[str, Any], name: str) -> Any:
    """A catalog's schema as the component ``name``: its local references
    (``#/$defs/...``) now point inside the component, where it sits in this document."""
    base = SCHEMAS + name.replace("~", "~0").replace("/", "~1")

    def rebased(node: Any) -> Any:
        if isinstance(node, Mapping):
            return {
                key: base + value[1:]
                if key == "$ref" and isinstance(value, str) and value.startswith("#")
                else rebased(value)
                for key, value in node.items()
            }
        if isinstance(node, list):
            return [rebased(item) for item in node]
        return node

    return rebased(schema)


def _per_value(field: str, chosen: Mapping[str, str], target: str) -> list[dict[str, Any]]:
    """``if <field> is X then <target> is the schema of X``, for each X (JSON Schema
    2020-12, the dialect of OpenAPI 3.1)."""
    return [
        {
            "if": {"properties": {field: {"const": value}}, "required": [field]},
            "then": {"properties": {target: _ref(name)}},
        }
        for value, name in chosen.items()
    ]


def _tailored(
    schemas: dict[str, Any], catalog: ModelCatalog
) -> tuple[dict[str, str], dict[str, str]]:
    """The contracts (``schemas``) narrowed to this deployment's catalog: its aliases,
    their parameters and each task's result. Returns the component names of the
    parameters, by alias, and of the results, by task."""
    parameters: dict[str, str] = {}
    for alias, card in catalog.cards.items():
        name = card.parameters.name
        if name not in schemas:
            schemas[name] = _component(card.parameters.json_schema(), name)
        parameters[alias] = name
    submit = schemas["SubmitRequestBody"]
    submit["properties"]["model"] = {**submit["properties"]["model"], "enum": list(catalog.aliases)}
    if len(set(parameters.values())) == 1:
        submit["properties"]["parameters"] = {
            **_ref(next(iter(parameters.values()))),
            "description": "The model's parameters: see x-model-parameters",
        }
    else:
        submit["properties"]["parameters"] = {
            "type": "object",
            "description": "The parameters of the model named: see x-model-parameters",
        }
        submit["allOf"] = _per_value("model", parameters, "parameters")
    results = {DOCUMENT_ANALYSIS: "InferenceResult"}
    for card in catalog.cards.values():
        task = card.task
        if task.name not in results:
            name = f"{task.name}.result"
            schemas[name] = _component(task.output_schema, name)
            results[task.name] = name
    if len(results) > 1:
        document = schemas["ResultDocument"]
        document["allOf"] = _per_value("task", results, "result")
        document["properties"]["result"]["description"] = (
            "The task's result: see x-task-results (document-analysis: InferenceResult)"
        )
    return parameters, results


@lru_cache(maxsize=8)
def _document(
    upload_media_types: tuple[str, ...], catalog: ModelCatalog, entra_audience: str | None
) -> dict[str, Any]:
    schemas = _component_schemas()
    parameters, results = _tailored(schemas, catalog)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Inferbus",
            "version": API_VERSION,
            "description": "Durable AI inference requests: submit (202), poll, fetch results; "
            "and the Event Grid webhook. Errors are RFC 9457 problem details.",
        },
        "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
        "servers": [{"url": "/api"}],
        "security": _global_security(entra_audience),
        "paths": {
            **_request_paths(upload_media_types, catalog),
            **_batch_paths(),
            **_usage_paths(),
            **_event_paths(entra_audience),
        },
        "components": {
            "schemas": schemas,
            "securitySchemes": _security_schemes(entra_audience),
            "headers": {
                "RetryAfter": {
                    "description": "Seconds to wait before the next attempt",
                    "schema": {"type": "string", "pattern": "^[0-9]+$"},
                }
            },
        },
        "x-model-parameters": {alias: _ref(name) for alias, name in parameters.items()},
        "x-model-tasks": {alias: card.task.name for alias, card in catalog.cards.items()},
        "x-task-results": {task: _ref(name) for task, name in results.items()},
    }


def openapi_document(
    upload_media_types: tuple[str, ...],
    catalog: ModelCatalog,
    entra_audience: str | None = None,
) -> dict[str, Any]:
    """The document for a deployment that takes raw uploads of ``upload_media_types``
    (AllowedUploadMediaTypes) and serves ``catalog``, behind App Service authentication
    requiring Entra tokens for ``entra_audience`` (ApiTokenAudience; None: no such
    authentication, as locally). A copy: callers may change it."""
    return copy.deepcopy(_document(upload_media_types, catalog, entra_audience or None))


@dataclass(frozen=True)
class OpenApiEndpoint:
    """``GET /api/openapi.json`` of this deployment (built once, then cached)."""

    upload_media_types: tuple[str, ...]
    catalog: ModelCatalog
    # The audience of the Entra tokens App Service authentication requires on the API
    # (ApiTokenAudience); None where it does not guard the API (local development).
    entra_audience: str | None = None

    def serve(self, request: ApiRequest) -> ApiResponse:
        """Serialized from the cached document: no copy needed."""
        document = _document(self.upload_media_types, self.catalog, self.entra_audience or None)
        return json_response(200, document)
