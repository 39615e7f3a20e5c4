"""Framework-free HTTP request/response values and their ``azure.functions`` forms.

The conversions follow the Python worker: header names are case-insensitive (repeated
headers are joined with ", "), ``params`` holds the first value of each query parameter,
``route_params`` the values captured by the route template, and the response keeps every
header (repeated ``Set-Cookie`` included); when the function sets no ``Content-Type`` the
response's ``mimetype``/``charset`` provide it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import azure.functions as func  # noqa: TID251 (the host must speak the worker's types)


@dataclass
class IncomingRequest:
    method: str
    path: str
    url: str
    query: list[tuple[str, str]]
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        values = [value for key, value in self.headers if key.lower() == lowered]
        return ", ".join(values) if values else None

    def query_value(self, name: str) -> str | None:
        return next((value for key, value in self.query if key == name), None)


@dataclass
class OutgoingResponse:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    @classmethod
    def json(cls, status: int, document: Any) -> OutgoingResponse:
        body = json.dumps(document).encode()
        return cls(status, [("Content-Type", "application/json; charset=utf-8")], body)

    @classmethod
    def text(cls, status: int, text: str) -> OutgoingResponse:
        return cls(status, [("Content-Type", "text/plain; charset=utf-8")], text.encode())


def to_function_request(request: IncomingRequest, route_params: dict[str, str]) -> func.HttpRequest:
    headers: dict[str, str] = {}
    for key, value in request.headers:
        lowered = key.lower()
        headers[lowered] = f"{headers[lowered]}, {value}" if lowered in headers else value
    params: dict[str, str] = {}
    for key, value in request.query:
        params.setdefault(key, value)
    return func.HttpRequest(
        method=request.method.upper(),
        url=request.url,
        headers=headers,
        params=params,
        route_params=route_params,
        body=request.body,
    )


def from_function_result(result: Any) -> OutgoingResponse:
    """The HTTP answer for what an HTTP function returned (its ``$return`` binding)."""
    if result is None:
        return OutgoingResponse(204)
    if isinstance(result, func.HttpResponse):
        headers = [(str(k), str(v)) for k, v in result.headers.items()]
        if not any(k.lower() == "content-type" for k, _ in headers) and result.mimetype:
            content_type = result.mimetype
            if result.charset and result.mimetype.startswith("text/"):
                content_type = f"{content_type}; charset={result.charset}"
            headers.append(("Content-Type", content_type))
        return OutgoingResponse(int(result.status_code), headers, result.get_body() or b"")
    if isinstance(result, bytes | bytearray):
        return OutgoingResponse(200, [("Content-Type", "application/octet-stream")], bytes(result))
    if isinstance(result, str):
        return OutgoingResponse.text(200, result)
    return OutgoingResponse.json(200, result)
