"""Conversion between ``azure.functions`` HTTP objects and the framework-free API types,
and the hand-over of a request to its endpoint among the process-wide ``HttpEndpoints``."""

from __future__ import annotations

from collections.abc import Callable

import azure.functions as func

from shared.entrypoints.bootstrap import get_services
from shared.entrypoints.builders import HttpEndpoints
from shared.entrypoints.http.messages import ApiRequest, ApiResponse, guarded

Handler = Callable[[ApiRequest], ApiResponse]
Chooser = Callable[[HttpEndpoints], Handler]  # e.g. lambda http: http.requests.submit


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


def serve(choose: Chooser, req: func.HttpRequest) -> func.HttpResponse:
    """Run the handler ``choose`` picks from the process-wide endpoints; errors (a failure
    to build the services included) become problem+json."""
    return to_http_response(
        guarded(lambda request: choose(get_services().http)(request), to_api_request(req))
    )
