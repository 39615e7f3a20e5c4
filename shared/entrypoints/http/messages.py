"""Plain HTTP request and response values and the helpers every handler shares.

Handlers take the ``Services`` they use and an ``ApiRequest``, and return an
``ApiResponse``; ``triggers/`` converts them to and from ``azure.functions`` objects and
passes the process-wide services in. This keeps the API testable without the Functions
runtime (tests wire in-memory services) and the triggers at a few lines each.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.entrypoints.http.problems import (
    PROBLEM_CONTENT_TYPE,
    Problem,
    problem_for,
    unexpected_problem,
)
from shared.errors import InferbusError
from shared.redaction import redact_url

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ApiRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    params: Mapping[str, str] = field(default_factory=dict)
    route_params: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())

    @property
    def media_type(self) -> str:
        """The Content-Type without parameters, lower case ("" when absent)."""
        return (self.header("content-type") or "").split(";")[0].strip().lower()


@dataclass(frozen=True)
class ApiResponse:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def json_response(status: int, document: Any, headers: dict[str, str] | None = None) -> ApiResponse:
    return ApiResponse(
        status,
        json.dumps(document, default=str).encode("utf-8"),
        {"Content-Type": "application/json", **(headers or {})},
    )


def problem_response(problem: Problem) -> ApiResponse:
    return ApiResponse(
        problem.status, problem.body(), {"Content-Type": PROBLEM_CONTENT_TYPE, **problem.headers}
    )


def guarded(handler: Callable[[ApiRequest], ApiResponse], request: ApiRequest) -> ApiResponse:
    """Run a handler; map application errors to problems and bugs to a bare 500."""
    try:
        return handler(request)
    except InferbusError as error:
        problem = problem_for(error)
        level = logging.WARNING if problem.status >= 500 else logging.INFO
        url = redact_url(request.url)  # the function key rides in ?code=
        log.log(level, "%s %s -> %d %s", request.method, url, problem.status, error)
        return problem_response(problem)
    except Exception:
        log.exception("%s %s failed unexpectedly", request.method, redact_url(request.url))
        return problem_response(unexpected_problem())
