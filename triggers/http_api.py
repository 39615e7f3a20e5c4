"""HTTP triggers of the request API (``/api/v1/requests``, ``/api/v1/batches``), its
OpenAPI document and the page that renders it.

Function-level keys authenticate the calling application (or the API gateway in front);
App Service authentication identifies the tenant (see shared/intake/tenancy.py). The
document (``/api/openapi.json``) and its page (``/api/docs``, Swagger UI) are anonymous:
they hold no secret. The page needs no services, so it is served without them. Each
other trigger hands its request to its endpoint (``builders.HttpEndpoints``).
"""

from __future__ import annotations

import azure.functions as func

from shared.entrypoints.http.docs import serve_docs_asset, serve_docs_page
from shared.entrypoints.http.messages import guarded
from triggers.http_adapter import serve, to_api_request, to_http_response
from triggers.invocation import in_trace

bp = func.Blueprint()


@bp.function_name("submit_request")
@bp.route(route="v1/requests", methods=["POST"], auth_level=func.AuthLevel.FUNCTION)
def submit_request(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return serve(lambda http: http.requests.submit, req)


@bp.function_name("list_requests")
@bp.route(route="v1/requests", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def list_requests(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return serve(lambda http: http.listing.list, req)


@bp.function_name("get_request")
@bp.route(route="v1/requests/{id}", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def get_request(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return serve(lambda http: http.requests.status, req)


@bp.function_name("get_request_result")
@bp.route(route="v1/requests/{id}/result", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def get_request_result(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return serve(lambda http: http.requests.result, req)


@bp.function_name("cancel_request")
@bp.route(route="v1/requests/{id}", methods=["DELETE"], auth_level=func.AuthLevel.FUNCTION)
def cancel_request(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return serve(lambda http: http.requests.cancel, req)


@bp.function_name("get_batch")
@bp.route(route="v1/batches/{id}", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def get_batch(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return serve(lambda http: http.batches.get, req)


@bp.function_name("cancel_batch")
@bp.route(route="v1/batches/{id}", methods=["DELETE"], auth_level=func.AuthLevel.FUNCTION)
def cancel_batch(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return serve(lambda http: http.batches.cancel, req)


@bp.function_name("openapi_document")
@bp.route(route="openapi.json", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def openapi_document(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return serve(lambda http: http.openapi.serve, req)


@bp.function_name("api_docs_page")
@bp.route(route="docs", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def api_docs_page(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return to_http_response(guarded(serve_docs_page, to_api_request(req)))


@bp.function_name("api_docs_asset")
@bp.route(route="docs/{asset}", methods=["GET"], auth_level=func.AuthLevel.ANONYMOUS)
def api_docs_asset(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return to_http_response(guarded(serve_docs_asset, to_api_request(req)))


@bp.function_name("get_usage")
@bp.route(route="v1/usage", methods=["GET"], auth_level=func.AuthLevel.FUNCTION)
def get_usage(req: func.HttpRequest, context: func.Context) -> func.HttpResponse:
    with in_trace(context):
        return serve(lambda http: http.usage.get, req)
