"""The HTTP front door: HTTP-triggered functions, the webhooks and two admin endpoints.

A stdlib ``ThreadingHTTPServer`` speaking HTTP/1.1 with keep-alive: each connection has
its own thread, which waits while the worker runs the function. Paths:

* ``/<routePrefix>/<route>``: HTTP triggers, with the auth level of each function;
* ``/runtime/webhooks/eventgrid`` and ``/runtime/webhooks/blobs``: see webhooks.py;
* ``/admin/host/ping`` (anonymous), ``/admin/host/status`` and ``/admin/functions``
  (master key).

Every error the host answers itself, including those ``http.server`` raises while it
parses the request (request line or header fields too large, malformed request line, a
method the host does not serve), is ``application/problem+json`` (problems.py).
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from functions_host.functions import FunctionSpec
from functions_host.http_messages import (
    IncomingRequest,
    OutgoingResponse,
    from_return_value,
    to_rpc_http,
)
from functions_host.invocation import HostStoppingError, Invoker
from functions_host.keys import HostKeys
from functions_host.problems import problem
from functions_host.redaction import redact
from functions_host.routing import RouteTable, compile_route
from functions_host.webhooks import WebhookHandler

log = logging.getLogger("host.http")
MAX_BODY_BYTES = 100 * 1024 * 1024  # the host's default request size limit
# http.server's own limits (it refuses with 414 and 431 before any handler runs).
MAX_REQUEST_LINE_BYTES = 65536
MAX_HEADER_LINE_BYTES = 65536
MAX_HEADER_FIELDS = 100
SERVED_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
_PARSER_PROBLEMS = {
    HTTPStatus.REQUEST_URI_TOO_LONG: (
        "uri-too-long",
        f"the request line is longer than {MAX_REQUEST_LINE_BYTES} bytes",
    ),
    HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE: (
        "request-header-fields-too-large",
        f"a header line is longer than {MAX_HEADER_LINE_BYTES} bytes, or there are more than"
        f" {MAX_HEADER_FIELDS} header fields",
    ),
    HTTPStatus.HTTP_VERSION_NOT_SUPPORTED: (
        "http-version-not-supported",
        "the host speaks HTTP/1.0 and HTTP/1.1",
    ),
}
_DETAIL_LIMIT = 200  # a malformed request line is quoted, but never at full length


class Dispatcher:
    """Maps an IncomingRequest to a function (or webhook) and its answer."""

    def __init__(
        self, functions: list[FunctionSpec], invoker: Invoker, keys: HostKeys, route_prefix: str
    ) -> None:
        self.routes: RouteTable[FunctionSpec] = RouteTable()
        for spec in functions:
            if spec.trigger_type == "httpTrigger":
                template = str(spec.trigger.get("route") or spec.name)
                methods = spec.trigger.get("methods")
                self.routes.add(compile_route(template, methods, spec, route_prefix))
        self._functions = functions
        self._invoker = invoker
        self._keys = keys
        self._webhooks = WebhookHandler(functions, invoker, keys)
        self.stopping = False

    def handle(self, request: IncomingRequest) -> OutgoingResponse:
        path = request.path.rstrip("/") or "/"
        lowered = path.lower()
        if lowered == "/admin/host/ping":
            return OutgoingResponse(200)
        if lowered == "/admin/host/status":
            if not self._keys.allows("admin", self._presented_key(request)):
                return _needs_key("the master key")
            state = "Stopping" if self.stopping else "Running"
            return OutgoingResponse.json(200, {"state": state, "inFlight": self._invoker.in_flight})
        if lowered == "/admin/functions":
            if not self._keys.allows("admin", self._presented_key(request)):
                return _needs_key("the master key")
            return OutgoingResponse.json(
                200,
                [
                    {"name": spec.name, "config": {"bindings": spec.bindings}}
                    for spec in self._functions
                ],
            )
        if lowered.startswith("/runtime/webhooks/"):
            extension = lowered.removeprefix("/runtime/webhooks/")
            if extension in ("eventgrid", "blobs"):
                return self._webhooks.handle(extension, request)
            return problem(
                404, "not-found", f"no webhook extension {extension!r} (eventgrid, blobs)"
            )
        if path == "/" and request.method.upper() in ("GET", "HEAD"):
            return OutgoingResponse.text(200, "Your Functions app is up and running (local host).")
        found = self.routes.find(request.method, path)
        if found is None:
            return problem(404, "not-found", f"no function answers {request.method.upper()} {path}")
        spec, route_params = found
        level = str(spec.trigger.get("authLevel", "FUNCTION"))
        if not self._keys.allows(level, self._presented_key(request)):
            key = "the master key" if level.lower() == "admin" else "a function key"
            return _needs_key(key)
        return self._invoke_http(spec, request, route_params)

    @staticmethod
    def _presented_key(request: IncomingRequest) -> str | None:
        return request.query_value("code") or request.header("x-functions-key")

    def _invoke_http(
        self, spec: FunctionSpec, request: IncomingRequest, route_params: dict[str, str]
    ) -> OutgoingResponse:
        inputs = {spec.trigger_parameter: to_rpc_http(request, route_params)}
        try:
            result = self._invoker.invoke(spec, inputs, trace_parent=request.header("traceparent"))
        except HostStoppingError:
            return problem(
                503, "host-stopping", "the host is stopping; retry later", [("Retry-After", "5")]
            )
        except Exception:
            return problem(
                500, "function-failed", f"function {spec.name} failed; the host's log says why"
            )
        try:
            return from_return_value(result)
        except Exception:
            log.exception("function %s returned a value that is not an HTTP response", spec.name)
            return problem(
                500,
                "invalid-function-response",
                f"function {spec.name} returned a value that is not an HTTP response",
            )


def _needs_key(which: str) -> OutgoingResponse:
    return problem(
        401, "unauthorized", f"this endpoint needs {which} (?code= or an x-functions-key header)"
    )


class _MalformedBody(ValueError):
    """The request's body framing is broken (the connection cannot be reused)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LocalHttpServer

    def setup(self) -> None:
        super().setup()
        # Without it, small responses wait for the client's delayed ACK (~40 ms per request).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        # The request line carries ?code=<key>: keys never reach a log, not even at debug.
        log.debug("%s %s", self.address_string(), redact(format % args))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """What http.server sends for a request it cannot parse, as problem+json (not HTML)."""
        self.log_error("code %d, message %s", code, message)
        if not self.request_version.startswith("HTTP/1."):
            # Refused before its version was understood: http.server would answer as
            # HTTP/0.9 (a bare body, no status line or headers).
            self.request_version = self.protocol_version
        status = HTTPStatus(code)
        slug, detail = _PARSER_PROBLEMS.get(status, (_slug(status), ""))
        if not detail:
            detail = _quoted(message or explain or status.description)
        self._refuse(problem(status, slug, detail))

    def parse_request(self) -> bool:
        """http.server's parsing, then 405 for a method the host does not serve (not 501)."""
        if not super().parse_request():
            return False
        if self.command not in SERVED_METHODS:
            allowed = ", ".join(SERVED_METHODS)
            detail = f"the host does not serve {_quoted(self.command)} requests (only {allowed})"
            self._refuse(problem(405, "method-not-allowed", detail, [("Allow", allowed)]))
            return False
        return True

    def _refuse(self, response: OutgoingResponse) -> None:
        """Answer and close: what is left of the request on the socket cannot be read."""
        self.close_connection = True
        self._write(response)

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            return self._read_chunked()
        declared = (self.headers.get("Content-Length") or "0").strip()
        if not (declared.isascii() and declared.isdigit()):  # not "-1", "1e3", "²"
            raise _MalformedBody(
                f"Content-Length {_quoted(declared)!r} is not a non-negative integer"
            )
        length = int(declared)
        if length > MAX_BODY_BYTES:
            raise _BodyTooLarge(length)
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        try:
            body = self._read_body()
        except _BodyTooLarge as error:
            detail = (
                f"the body ({error.size} bytes) is larger than the host's limit of"
                f" {MAX_BODY_BYTES} bytes"
            )
            self._refuse(problem(413, "payload-too-large", detail))
            return
        except _MalformedBody as error:
            self._refuse(problem(400, "malformed-request", str(error)))
            return
        split = urlsplit(self.path)
        host = self.headers.get("Host") or f"127.0.0.1:{self.server.server_port}"
        request = IncomingRequest(
            method=self.command,
            path=split.path,
            url=f"http://{host}{self.path}",
            query=parse_qsl(split.query, keep_blank_values=True),
            headers=list(self.headers.items()),
            body=body,
        )
        self.server.request_started()
        try:
            try:
                response = self.server.dispatcher.handle(request)
            except Exception:
                log.exception("unhandled error serving %s %s", self.command, split.path)
                response = problem(500, "internal-error", "the host failed; its log says why")
            self._write(response)
        finally:
            self.server.request_finished()

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        received = 0
        while True:
            line = self.rfile.readline(MAX_HEADER_LINE_BYTES + 1)
            size_field = line.split(b";", 1)[0].strip()
            try:
                size = int(size_field, 16)
            except ValueError:
                text = size_field[:_DETAIL_LIMIT].decode("latin-1")
                raise _MalformedBody(f"chunk size {text!r} is not a hexadecimal number") from None
            if size < 0:
                raise _MalformedBody(f"chunk size {size} is negative")
            received += size
            if received > MAX_BODY_BYTES:
                raise _BodyTooLarge(received)
            if size == 0:
                while self.rfile.readline(MAX_HEADER_LINE_BYTES + 1).strip():
                    pass
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline(MAX_HEADER_LINE_BYTES + 1)

    def _write(self, response: OutgoingResponse) -> None:
        try:
            reason = HTTPStatus(response.status).phrase
        except ValueError:
            reason = ""
        self.send_response(response.status, reason)
        for key, value in response.headers:
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(response.body)))
        if self.server.dispatcher.stopping:
            self.close_connection = True
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    # http.server dispatches on these fixed names.
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve  # noqa: N815


class _BodyTooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def _slug(status: HTTPStatus) -> str:
    if status == HTTPStatus.BAD_REQUEST:
        return "malformed-request"
    return status.phrase.lower().replace(" ", "-")


def _quoted(text: str) -> str:
    """Request text for a problem's detail: keys redacted, cut to a readable length."""
    shown = redact(text)
    return shown if len(shown) <= _DETAIL_LIMIT else shown[:_DETAIL_LIMIT] + "..."


class LocalHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher
        super().__init__(address, _Handler)
        self._thread: threading.Thread | None = None
        self._active = 0
        self._idle = threading.Condition()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-answer is routine; anything else is logged in full."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            log.debug("connection from %s ended: %r", client_address, error)
            return
        log.exception("error serving %s", client_address)

    def request_started(self) -> None:
        with self._idle:
            self._active += 1

    def request_finished(self) -> None:
        with self._idle:
            self._active -= 1
            self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request is being answered (responses of drained invocations)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._active == 0, timeout_s)

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="http-server",
            daemon=True,
        )
        self._thread.start()
