"""Conversion between ``azure.functions`` HTTP objects and the framework-free API types."""

from __future__ import annotations

from collections.abc import Callable

import azure.functions as func

from shared.intake.http import ApiRequest, ApiResponse, guarded


def to_api_request(req: func.HttpRequest) -> ApiRequest:
    return ApiRequest(
        method=req.method,
        url=req.url,
        headers={key.lower(): value for key, value in req.headers.items()},
        params=dict(req.params),
        route_params=dict(req.route_params),
        body=req.get_body() or b"",
    )


def to_http_response(response: ApiResponse) -> func.HttpResponse:
    return func.HttpResponse(
        body=response.body, status_code=response.status, headers=response.headers
    )


def serve(handler: Callable[[ApiRequest], ApiResponse], req: func.HttpRequest) -> func.HttpResponse:
    """Run an API handler for a Functions HTTP request; errors become problem+json."""
    return to_http_response(guarded(handler, to_api_request(req)))
