"""Helpers of the conformance suite: scaled time, events, dead letters, a webhook receiver.

The suite runs the emulator with ``--time-scale 0.05``: the service's 60 s lock lasts 3 s,
a 10 s wait or release delay 0.5 s, and the push retry schedule 0 s, 0.5 s, 1.5 s...
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from azure.core.messaging import CloudEvent
from azure.storage.blob import BlobServiceClient

TIME_SCALE = 0.05
DEAD_LETTER_CONTAINER = "test-deadletters"
NAMESPACE = "inferbus-test"


def scaled(seconds: float) -> float:
    """How long ``seconds`` of the service's time last in the suite's emulator."""
    return seconds * TIME_SCALE


def make_event(event_type: str = "com.example.Test", **fields: Any) -> CloudEvent[Any]:
    fields.setdefault("data", {"n": 1})
    return CloudEvent(source="/eventgrid-emulator/tests", type=event_type, **fields)


def wait_until(condition: Callable[[], Any], timeout: float = 10.0) -> Any:
    """The first truthy value of ``condition()``; AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.05)


class DeadLetters:
    """Reads the dead-letter blobs the emulator writes to Azurite."""

    def __init__(self, connection_string: str, container: str = DEAD_LETTER_CONTAINER) -> None:
        self._container = BlobServiceClient.from_connection_string(
            connection_string
        ).get_container_client(container)

    def records(self, topic: str, subscription: str) -> list[tuple[str, dict[str, Any]]]:
        """(blob name, record) of every dead letter of ``topic/subscription`` so far."""
        if not self._container.exists():
            return []
        found = []
        prefix = f"{NAMESPACE}/{topic}/{subscription}/"
        for blob in self._container.list_blobs(name_starts_with=prefix):
            content = self._container.download_blob(blob.name).readall()
            found += [(blob.name, record) for record in json.loads(content)]
        return found

    def find(
        self, topic: str, subscription: str, event_id: str, timeout: float = 10.0
    ) -> tuple[str, dict[str, Any]]:
        def lookup() -> tuple[str, dict[str, Any]] | None:
            for name, record in self.records(topic, subscription):
                if record["event"]["id"] == event_id:
                    return name, record
            return None

        found: tuple[str, dict[str, Any]] = wait_until(lookup, timeout)
        return found


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Behaviour:
    """How one webhook path answers: handshakes to refuse first, then POST statuses."""

    refuse_handshakes: int = 0
    statuses: list[int] = field(default_factory=list)  # then 200 for ever
    default_status: int = 200


class WebhookReceiver:
    """A local webhook that records every request and answers as its path's Behaviour."""

    def __init__(self) -> None:
        self.behaviours: dict[str, Behaviour] = {}
        self.received: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _record(self) -> Behaviour:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                request = Received(
                    self.command, self.path, dict(self.headers.items()), body, time.monotonic()
                )
                with receiver._lock:
                    receiver.received.append(request)
                    return receiver.behaviours.setdefault(self.path, Behaviour())

            def _answer(self, status: int, headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_OPTIONS(self) -> None:
                behaviour = self._record()
                with receiver._lock:
                    refuse = behaviour.refuse_handshakes > 0
                    behaviour.refuse_handshakes -= 1 if refuse else 0
                if refuse:
                    self._answer(200)  # no WebHook-Allowed-Origin: not validated
                else:
                    origin = self.headers.get("WebHook-Request-Origin", "")
                    self._answer(200, {"WebHook-Allowed-Origin": origin})

            def do_POST(self) -> None:
                behaviour = self._record()
                with receiver._lock:
                    status = (
                        behaviour.statuses.pop(0)
                        if behaviour.statuses
                        else behaviour.default_status
                    )
                self._answer(status)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def requests(self, path: str, method: str | None = None) -> list[Received]:
        with self._lock:
            return [
                r
                for r in self.received
                if r.path == path and (method is None or r.method == method)
            ]

    def wait_for_posts(self, path: str, count: int, timeout: float = 10.0) -> list[Received]:
        found: list[Received] = wait_until(
            lambda: (posts := self.requests(path, "POST")) and len(posts) >= count and posts,
            timeout,
        )
        return found

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def unique_id() -> str:
    return str(uuid.uuid4())
