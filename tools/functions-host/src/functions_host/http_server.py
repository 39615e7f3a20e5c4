"""The HTTP front door: HTTP-triggered functions, the webhooks and two admin endpoints.

A stdlib ``ThreadingHTTPServer`` speaking HTTP/1.1 with keep-alive: each connection has
its own thread, which waits while the worker runs the function. Paths:

* ``/<routePrefix>/<route>``: HTTP triggers, with the auth level of each function;
* ``/runtime/webhooks/eventgrid`` and ``/runtime/webhooks/blobs``: see webhooks.py;
* ``/admin/host/ping`` (anonymous), ``/admin/host/status`` and ``/admin/functions``
  (master key).
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
from functions_host.redaction import redact
from functions_host.routing import RouteTable, compile_route
from functions_host.webhooks import WebhookHandler

log = logging.getLogger("host.http")
MAX_BODY_BYTES = 100 * 1024 * 1024  # the host's default request size limit


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
                return OutgoingResponse(401)
            state = "Stopping" if self.stopping else "Running"
            return OutgoingResponse.json(200, {"state": state, "inFlight": self._invoker.in_flight})
        if lowered == "/admin/functions":
            if not self._keys.allows("admin", self._presented_key(request)):
                return OutgoingResponse(401)
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
            return OutgoingResponse(404)
        if path == "/" and request.method.upper() in ("GET", "HEAD"):
            return OutgoingResponse.text(200, "Your Functions app is up and running (local host).")
        found = self.routes.find(request.method, path)
        if found is None:
            return OutgoingResponse(404)
        spec, route_params = found
        level = str(spec.trigger.get("authLevel", "FUNCTION"))
        if not self._keys.allows(level, self._presented_key(request)):
            return OutgoingResponse(401)
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
            return OutgoingResponse(503, [("Retry-After", "5")])
        except Exception:
            return OutgoingResponse(500)
        try:
            return from_return_value(result)
        except Exception:
            log.exception("function %s returned a value that is not an HTTP response", spec.name)
            return OutgoingResponse(500)


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

    def _serve(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY_BYTES:
            self._write(OutgoingResponse(413 if length > 0 else 400))
            return
        body = self.rfile.read(length) if length else b""
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = self._read_chunked()
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
                response = OutgoingResponse(500)
            self._write(response)
        finally:
            self.server.request_finished()

    def _read_chunked(self) -> bytes:
        chunks: list[bytes] = []
        while True:
            size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline().strip():
                    pass
                return b"".join(chunks)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()

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
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(response.body)

    # http.server dispatches on these fixed names.
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve  # noqa: N815


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
