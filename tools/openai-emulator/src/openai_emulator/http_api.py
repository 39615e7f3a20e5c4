"""The HTTP API: the files and batches routes as the ``openai`` SDK calls them, and controls.

``AzureOpenAI(azure_endpoint=E, api_version=V)`` sends ``E/openai/<route>?api-version=V``;
``OpenAI(base_url=E/openai/v1/)`` sends ``E/openai/v1/<route>`` (no api-version). Routes:
``POST|GET files``, ``GET|DELETE files/{id}``, ``GET files/{id}/content``,
``POST|GET batches``, ``GET batches/{id}``, ``POST batches/{id}/cancel``, and chat
completions: ``POST deployments/{deployment}/chat/completions`` and, on the v1 route,
``POST chat/completions`` (``chat``). They need the ``api-key`` header equal to the key,
or any ``Authorization: Bearer`` token (Entra ID, or an OpenAI-compatible client's key:
not verified); otherwise 401. ``/_emulator/...``, ``/stats`` and ``/health`` need no key.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import socket
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .batches import BatchService
from .chat import DEFAULT_LIMITER, Answered, ChatService
from .errors import ApiError, bad_request, not_found, unauthorized
from .files import check_expiry_seconds
from .listing import query_int
from .multipart import parse_form

log = logging.getLogger("openai_emulator.http")

MAX_REQUEST_BYTES = 512 * 1024 * 1024  # the service's largest file, plus nothing
_API = re.compile(
    r"^/openai(?P<v1>/v1)?/(?P<route>files|batches)(?:/(?P<id>[^/]+)(?:/(?P<action>content|cancel))?)?/?$"
)
_CHAT = re.compile(
    r"^/openai(?:/deployments/(?P<deployment>[^/]+)|(?P<v1>/v1))/chat/completions/?$"
)
_CONTROL = re.compile(
    r"^/_emulator/(?:batches/(?P<id>[^/]+)/(?P<action>advance|expire)"
    r"|deployments/(?P<deployment>[^/]+)|(?P<name>quota|stats|reset))$"
)

# The method each control operation answers to (any other: 405).
_CONTROL_METHODS = {
    "advance": "POST",
    "expire": "POST",
    "quota": "PUT",
    "deployment": "PUT",
    "stats": "GET",
    "reset": "POST",
}

Reply = tuple[int, Any]  # status and a JSON document, or bytes sent as they are


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], service: BatchService, api_key: str, chat: ChatService
    ) -> None:
        super().__init__(address, ApiHandler)
        self.service = service
        self.api_key = api_key
        self.chat = chat


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"{}")
    except ValueError as error:
        raise bad_request("The request body is not valid JSON.") from error


def _first(query: dict[str, list[str]], name: str, default: str | None = None) -> str | None:
    values = query.get(name)
    return values[0] if values else default


def _required(document: dict[str, Any], name: str) -> Any:
    if name not in document:
        raise bad_request(f"The request body needs {name!r}.")
    return document[name]


class ApiHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ApiServer
    server_version = "OpenAIEmulator/0.1"

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle's algorithm
        # holds the body until the client's delayed ACK (about 40 ms per request).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _handle(self) -> None:
        try:
            body = self._read_body()
            chat = _CHAT.match(urllib.parse.urlsplit(self.path).path)
            if chat is not None:
                answered = self._chat(chat, body)
                self._send(
                    answered.status, json.dumps(answered.body).encode(), headers=answered.headers
                )
                return
            status, payload = self._route(body)
        except ApiError as error:
            self._send(error.status, error.body())
            return
        except Exception:
            log.exception("%s %s failed", self.command, self.path)
            self._send(500, ApiError(500, "server_error", "Emulator error.").body())
            return
        if isinstance(payload, bytes):
            self._send(status, payload, "application/octet-stream")
        else:
            self._send(status, json.dumps(payload).encode())

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():
                pass  # trailers
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            self.close_connection = True
            raise ApiError(
                413, "request_too_large", f"A request may not exceed {MAX_REQUEST_BYTES} bytes."
            )
        return self.rfile.read(length) if length else b""

    def _send(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _route(self, body: bytes) -> Reply:
        parts = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parts.query)
        if parts.path == "/health" and self.command == "GET":
            return 200, {"status": "ok"}
        if parts.path == "/stats" and self.command == "GET":
            return 200, self.server.chat.stats()
        control = _CONTROL.match(parts.path)
        if control:
            return self._control(control, body)
        api = _API.match(parts.path)
        if api is None:
            raise not_found(f"No such resource: {self.command} {parts.path}", "404")
        self._authorize()
        if not api["v1"] and not query.get("api-version"):
            raise bad_request(
                "The api-version query parameter (?api-version=) is required.", "MissingApiVersion"
            )
        handler = self._files if api["route"] == "files" else self._batches
        item_id = urllib.parse.unquote(api["id"]) if api["id"] else None
        return handler(item_id, api["action"], query, body)

    def _chat(self, match: re.Match[str], body: bytes) -> Answered:
        if self.command != "POST":
            raise self._method_not_allowed()
        self._authorize()
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        document = _json(body)
        if match["v1"]:
            deployment = document.get("model") if isinstance(document, dict) else None
            if not isinstance(deployment, str) or not deployment:
                raise bad_request(
                    "The request body needs 'model', the deployment.", "invalid_request"
                )
        else:
            if not query.get("api-version"):
                raise bad_request(
                    "The api-version query parameter (?api-version=) is required.",
                    "MissingApiVersion",
                )
            deployment = urllib.parse.unquote(match["deployment"])
        return self.server.chat.complete(deployment, document)

    def _authorize(self) -> None:
        key = self.headers.get("api-key")
        if key is not None and hmac.compare_digest(key.encode(), self.server.api_key.encode()):
            return
        scheme, _, token = (self.headers.get("Authorization") or "").strip().partition(" ")
        if key is None and scheme.lower() == "bearer" and token.strip():
            return  # an Entra ID token: accepted, not verified
        raise unauthorized()

    def _method_not_allowed(self) -> ApiError:
        return ApiError(
            405,
            "method_not_allowed",
            f"{self.command} is not allowed on {self.path.split('?')[0]}.",
        )

    def _files(
        self, file_id: str | None, action: str | None, query: dict[str, list[str]], body: bytes
    ) -> Reply:
        service = self.server.service
        if action == "cancel":
            raise not_found(f"No such resource: {self.path.split('?')[0]}", "404")
        if file_id is None:
            if self.command == "POST":
                return 200, self._upload(body)
            if self.command == "GET":
                limit = query_int(query, "limit", 10_000, 1, 10_000)
                purpose = _first(query, "purpose")
                order = _first(query, "order", "desc") or "desc"
                after = _first(query, "after")
                with service.lock:
                    return 200, service.files.page(purpose, order, after, limit)
            raise self._method_not_allowed()
        with service.lock:
            if action == "content" and self.command == "GET":
                return 200, service.files.get(file_id).data
            if action is None and self.command == "GET":
                return 200, service.files.get(file_id).to_json()
            if action is None and self.command == "DELETE":
                return 200, service.files.delete(file_id)
        raise self._method_not_allowed()

    def _upload(self, body: bytes) -> Any:
        form = parse_form(self.headers.get("Content-Type") or "", body)
        if "file" not in form.files:
            raise bad_request("The upload has no 'file' part.")
        purpose = form.fields.get("purpose")
        if not purpose:
            raise bad_request("The upload has no 'purpose' field.")
        expiry = None
        if "expires_after[seconds]" in form.fields:
            if form.fields.get("expires_after[anchor]") != "created_at":
                raise bad_request(
                    "expires_after.anchor must be 'created_at'.", "invalid_expires_after"
                )
            expiry = check_expiry_seconds(form.fields["expires_after[seconds]"], "expires_after")
        filename, data = form.files["file"]
        return self.server.service.upload(filename, purpose, data, expiry)

    def _batches(
        self, batch_id: str | None, action: str | None, query: dict[str, list[str]], body: bytes
    ) -> Reply:
        service = self.server.service
        if action == "content":
            raise not_found(f"No such resource: {self.path.split('?')[0]}", "404")
        if batch_id is None:
            if self.command == "POST":
                return 200, service.create(_json(body))
            if self.command == "GET":
                limit = query_int(query, "limit", 20, 1, 100)
                return 200, service.page(_first(query, "after"), limit)
        elif action == "cancel" and self.command == "POST":
            return 200, service.cancel(batch_id)
        elif action is None and self.command == "GET":
            return 200, service.retrieve(batch_id)
        raise self._method_not_allowed()

    def _control(self, match: re.Match[str], body: bytes) -> Reply:
        service = self.server.service
        operation = match["action"] or match["name"] or "deployment"
        if _CONTROL_METHODS[operation] != self.command:
            raise self._method_not_allowed()
        if operation == "stats":
            return 200, {**service.stats(), **self.server.chat.stats()}
        document = _json(body)
        if not isinstance(document, dict):
            raise bad_request("The request body must be a JSON object.")
        if operation == "advance":
            return 200, service.advance(match["id"], document.get("to"))
        if operation == "expire":
            return 200, service.expire(match["id"], document.get("completed_lines"))
        if operation == "quota":
            return 200, service.set_quota(
                _required(document, "enqueued_token_limit"), document.get("deployment")
            )
        if operation == "deployment":
            return 200, self.server.chat.configure(
                urllib.parse.unquote(match["deployment"]),
                document.get("tokens_per_minute"),
                document.get("requests_per_minute"),
                document.get("latency_ms") or 0,
                document.get("limiter") or DEFAULT_LIMITER,
            )
        service.reset()
        self.server.chat.reset()
        return 200, {"reset": True}
