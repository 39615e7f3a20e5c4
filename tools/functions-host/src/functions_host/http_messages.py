"""HTTP requests and responses: the host's own values and their FunctionRpc forms.

The request becomes ``RpcHttp`` as the Functions host sends it: header names lower-cased
(repeated headers joined with ", "), ``query`` with the first value of each query
parameter, ``params`` with the values the route template captured, and the body as bytes
(the worker announces ``RawHttpBodyBytes``). The answer is whatever the runtime encoded
for the ``$return`` binding: ``RpcHttp`` (status, headers, cookies, body), a string
(200 text/plain), or nothing (204).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import format_datetime
from typing import Any

from functions_host.protos import messages


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


def to_rpc_http(request: IncomingRequest, route_params: dict[str, str]) -> Any:
    """The request as the ``TypedData`` of an HTTP trigger."""
    headers: dict[str, str] = {}
    for key, value in request.headers:
        lowered = key.lower()
        headers[lowered] = f"{headers[lowered]}, {value}" if lowered in headers else value
    query: dict[str, str] = {}
    for key, value in request.query:
        query.setdefault(key, value)
    return messages.TypedData(
        http=messages.RpcHttp(
            method=request.method.upper(),
            url=request.url,
            headers=headers,
            query=query,
            params=route_params,
            body=messages.TypedData(bytes=request.body),
        )
    )


def _body_bytes(data: Any) -> bytes:
    kind = data.WhichOneof("data")
    if kind in ("bytes", "stream"):
        return bytes(getattr(data, kind))
    if kind in ("string", "json"):
        return str(getattr(data, kind)).encode()
    return b""


def _set_cookie(cookie: Any) -> str:
    """A ``Set-Cookie`` value from the runtime's ``RpcHttpCookie``."""
    parts = [f"{cookie.name}={cookie.value}"]
    # The runtime sends unset attributes as empty strings; an empty one is left out.
    if cookie.HasField("domain") and cookie.domain.value:
        parts.append(f"Domain={cookie.domain.value}")
    if cookie.HasField("path") and cookie.path.value:
        parts.append(f"Path={cookie.path.value}")
    if cookie.HasField("expires") and cookie.expires.HasField("value"):
        expires = cookie.expires.value.ToDatetime(tzinfo=UTC)
        parts.append(f"Expires={format_datetime(expires, usegmt=True)}")
    if cookie.HasField("max_age") and cookie.max_age.HasField("value"):
        parts.append(f"Max-Age={int(cookie.max_age.value)}")
    if cookie.HasField("secure") and cookie.secure.value:
        parts.append("Secure")
    if cookie.HasField("http_only") and cookie.http_only.value:
        parts.append("HttpOnly")
    same_site = {
        messages.RpcHttpCookie.Lax: "Lax",
        messages.RpcHttpCookie.Strict: "Strict",
        messages.RpcHttpCookie.ExplicitNone: "None",
    }.get(cookie.same_site)
    if same_site:
        parts.append(f"SameSite={same_site}")
    return "; ".join(parts)


def from_return_value(value: Any) -> OutgoingResponse:
    """The HTTP answer for a function's ``$return`` TypedData (None: no return value)."""
    kind = value.WhichOneof("data") if value is not None else None
    if kind is None:
        return OutgoingResponse(204)
    if kind == "http":
        http = value.http
        headers = [(str(k), str(v)) for k, v in http.headers.items()]
        headers += [("Set-Cookie", _set_cookie(cookie)) for cookie in http.cookies]
        status = int(http.status_code or 200)
        return OutgoingResponse(status, headers, _body_bytes(http.body))
    if kind == "string":
        return OutgoingResponse.text(200, value.string)
    if kind == "json":
        return OutgoingResponse(200, [("Content-Type", "application/json")], value.json.encode())
    return OutgoingResponse(200, [("Content-Type", "application/octet-stream")], _body_bytes(value))
