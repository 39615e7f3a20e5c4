"""A loopback HTTP server that records requests and answers with scripted responses.

It stands in for Azure HTTP services (Event Grid topics, Azure OpenAI) so the real SDK
clients can be tested over the wire: the tests check what the client sent and how it
handles each status code, header and body the service can return.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: bytes | dict[str, Any] | list[Any] = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Recorder:
    base_url: str
    requests: list[Recorded] = field(default_factory=list)
    replies: list[Reply] = field(default_factory=list)
    default: Callable[[Recorded], Reply] = lambda request: Reply(200)

    def reply(self, *replies: Reply) -> None:
        """Answer the next requests with these replies, in order, then the default."""
        self.replies.extend(replies)


@contextmanager
def recording_server() -> Iterator[Recorder]:
    recorder = Recorder(base_url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            parts = urlsplit(self.path)
            request = Recorded(
                method=self.command,
                path=parts.path,
                query=parse_qs(parts.query),
                headers={k.lower(): v for k, v in self.headers.items()},
                body=self.rfile.read(length) if length else b"",
            )
            with lock:
                recorder.requests.append(request)
                reply = recorder.replies.pop(0) if recorder.replies else recorder.default(request)
            body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            self.send_response(reply.status)
            headers = {"Content-Type": "application/json", **reply.headers}
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET = do_PUT = do_DELETE = do_OPTIONS = _handle  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    recorder.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
