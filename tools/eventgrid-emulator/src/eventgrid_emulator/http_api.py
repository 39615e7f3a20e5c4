"""The namespace data-plane HTTP API, as ``azure-eventgrid``'s namespace clients call it.

* ``POST /topics/{topic}:publish``: publish (structured, batched or binary CloudEvents);
* ``POST /topics/{topic}/eventsubscriptions/{sub}:receive?maxEvents=&maxWaitTime=``;
* ``POST .../{sub}:acknowledge``, ``:release?releaseDelayInSeconds=``, ``:reject`` and
  ``:renewLock``, each with the body ``{"lockTokens": [...]}``;
* ``GET /health`` and ``GET /runtime[/{topic}/{sub}]``: the emulator's own liveness and
  counts (no key needed).

Every data-plane request needs ``api-version`` and ``Authorization: SharedAccessKey <key>``
(what the SDK's ``AzureKeyCredential`` policy sends for namespaces); anything else is 401.
Bearer tokens are refused too: the emulator cannot validate them, and the SDK only sends
them over HTTPS anyway. The server is threaded so long-polling receives wait in parallel.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .broker import Broker
from .cloudevents import MAX_REQUEST_BYTES, parse_publish
from .errors import ApiError, argument_invalid, bad_request, not_found

log = logging.getLogger("eventgrid_emulator.http")

_ROUTE = re.compile(
    r"^/topics/(?P<topic>[^/:]+)(?:/eventsubscriptions/(?P<sub>[^/:]+))?:(?P<action>[A-Za-z]+)$"
)
_SETTLE = {
    "acknowledge": "acknowledge",
    "release": "release",
    "reject": "reject",
    "renewlock": "renewLock",
}
RELEASE_DELAYS = frozenset({"0", "10", "60", "600", "3600"})
MAX_EVENTS = (1, 100)
MAX_WAIT_TIME = (10, 120)  # seconds, the range the REST API documents
DEFAULT_MAX_WAIT_TIME = 60


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], broker: Broker) -> None:
        super().__init__(address, ApiHandler)
        self.broker = broker


def _int_parameter(
    query: dict[str, list[str]], name: str, default: int, bounds: tuple[int, int]
) -> int:
    values = query.get(name)
    if not values:
        return default
    try:
        value = int(values[0])
    except ValueError as error:
        raise argument_invalid(name) from error
    if not bounds[0] <= value <= bounds[1]:
        raise argument_invalid(name)
    return value


def _lock_tokens(body: bytes) -> list[str]:
    try:
        document = json.loads(body or b"null")
    except ValueError as error:
        raise bad_request("The request body is not valid JSON.") from error
    tokens = document.get("lockTokens") if isinstance(document, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise bad_request("The request body needs 'lockTokens', an array of strings.")
    if not tokens:
        raise bad_request("'lockTokens' is empty.")
    return tokens


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ApiServer
    server_version = "EventGridEmulator/0.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_POST(self) -> None:
        self._handle(self._post)

    def do_GET(self) -> None:
        self._handle(self._get)

    def _handle(self, operation: Callable[[bytes], tuple[int, Any]]) -> None:
        try:
            body = self._read_body()
            status, payload = operation(body)
        except ApiError as error:
            self._send(error.status, error.body())
            return
        except Exception:
            log.exception("%s %s failed", self.command, self.path)
            self._send(500, ApiError(500, "InternalServerError", "Emulator error.").body())
            return
        self._send(status, json.dumps(payload).encode())

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            self.close_connection = True
            raise ApiError(413, "PayloadTooLarge", "A request may not exceed 1 MB.")
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _get(self, _body: bytes) -> tuple[int, Any]:
        path = urllib.parse.urlsplit(self.path).path.rstrip("/")
        if path == "/health":
            return 200, {"status": "ok"}
        runtime = self.server.broker.runtime()
        if path == "/runtime":
            return 200, runtime
        if path.startswith("/runtime/"):
            wanted = urllib.parse.unquote(path.removeprefix("/runtime/")).lower()
            for name, counts in runtime.items():
                if name.lower() == wanted:
                    return 200, counts
        raise not_found(f"No such resource: {path}")

    def _authorize(self) -> None:
        scheme, _, key = (self.headers.get("Authorization") or "").strip().partition(" ")
        expected = self.server.broker.config.access_key
        if scheme.lower() != "sharedaccesskey" or not hmac.compare_digest(
            key.strip().encode(), expected.encode()
        ):
            raise ApiError(
                401,
                "Unauthorized",
                "The request is not authorized: send 'Authorization: SharedAccessKey <key>' "
                "with the namespace's access key.",
            )

    def _post(self, body: bytes) -> tuple[int, Any]:
        parts = urllib.parse.urlsplit(self.path)
        route = _ROUTE.match(parts.path)
        if route is None:
            raise not_found(f"No such resource: {parts.path}")
        self._authorize()
        query = urllib.parse.parse_qs(parts.query)
        if not query.get("api-version"):
            raise bad_request("The api-version query parameter is required.", "MissingApiVersion")
        topic = urllib.parse.unquote(route["topic"])
        action = route["action"].lower()
        broker = self.server.broker
        if route["sub"] is None:
            if action != "publish":
                raise not_found(f"No such operation: {route['action']}")
            content_type = self.headers.get("Content-Type") or ""
            broker.publish(topic, parse_publish(content_type, dict(self.headers.items()), body))
            return 200, {}
        subscription = urllib.parse.unquote(route["sub"])
        if action == "receive":
            max_events = _int_parameter(query, "maxEvents", 1, MAX_EVENTS)
            wait = _int_parameter(query, "maxWaitTime", DEFAULT_MAX_WAIT_TIME, MAX_WAIT_TIME)
            return 200, {"value": broker.receive(topic, subscription, max_events, wait)}
        if action not in _SETTLE:
            raise not_found(f"No such operation: {route['action']}")
        delay = 0.0
        if action == "release":
            raw_delay = (query.get("releaseDelayInSeconds") or ["0"])[0]
            if raw_delay not in RELEASE_DELAYS:
                raise argument_invalid("releaseDelayInSeconds")
            delay = float(raw_delay)
        tokens = _lock_tokens(body)
        result = broker.settle(topic, subscription, _SETTLE[action], tokens, delay)
        return 200, result.body()
