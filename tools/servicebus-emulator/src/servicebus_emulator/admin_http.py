"""A small read-only HTTP JSON endpoint for runtime counts (the emulator's admin port).

``ServiceBusAdministrationClient`` always speaks HTTPS to the AMQP host:port of the
connection string, so it cannot reach this plain-TCP emulator; this endpoint is the
documented substitute. Routes (GET only):

* ``/health`` -> ``{"status": "ok"}``
* ``/runtime`` -> every queue, topic and subscription
* ``/runtime/<queue>`` or ``/runtime/<topic>/Subscriptions/<sub>`` or ``/runtime/<topic>``

Field names follow ``QueueRuntimeProperties`` / ``SubscriptionRuntimeProperties``.
It runs on the broker's event loop, so its reads never race with message state.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import unquote

from .broker import BrokerError, Namespace

LOG = logging.getLogger("servicebus_emulator.admin")


def timestamp_iso(seconds: float) -> str:
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{whole}.{int(seconds % 1 * 1000):03d}Z"


def runtime_properties(namespace: Namespace, address: str) -> dict[str, Any]:
    """Counts of one queue, subscription or topic, named like the SDK's runtime properties."""
    path = namespace.normalize(address)
    if path in namespace.topics:
        topic = namespace.topics[path]
        return {
            "name": topic.name,
            "subscription_count": len(topic.subscriptions),
            "scheduled_message_count": len(topic.scheduled),
        }
    receivable = namespace.receivable(path)
    counts: dict[str, Any] = dict(receivable.store.counts())
    oldest = counts.pop("oldest_active_enqueued_at")
    dead = len(receivable.dead_letters.messages)
    counts.update(
        name=receivable.store.path,
        dead_letter_message_count=dead,
        transfer_dead_letter_message_count=0,
        transfer_message_count=0,
        total_message_count=len(receivable.store.messages) + dead,
        oldest_active_message_enqueued_time_utc=None if oldest is None else timestamp_iso(oldest),
    )
    return counts


def all_runtime_properties(namespace: Namespace) -> dict[str, Any]:
    entities: dict[str, Any] = {}
    for sendable, receivable in namespace.queues.values():
        entities[sendable.name] = runtime_properties(namespace, receivable.store.path)
    for topic in namespace.topics.values():
        entities[topic.name] = runtime_properties(namespace, topic.name)
        for sub in topic.subscriptions.values():
            entities[sub.store.path] = runtime_properties(namespace, sub.store.path)
    return entities


def route(namespace: Namespace, method: str, target: str) -> tuple[int, Any]:
    if method != "GET":
        return 405, {"error": "only GET is supported"}
    path = unquote(target.split("?", 1)[0]).strip("/")
    if path == "health":
        return 200, {"status": "ok"}
    if path == "runtime":
        return 200, all_runtime_properties(namespace)
    if path.startswith("runtime/"):
        try:
            return 200, runtime_properties(namespace, path.removeprefix("runtime/"))
        except BrokerError as error:
            return 404, {"error": error.description}
    return 404, {"error": f"no route {target}"}


async def serve_client(
    namespace: Namespace, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    try:
        request_line = (await asyncio.wait_for(reader.readline(), 10)).decode("latin-1").split()
        while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
            pass
        if len(request_line) < 2:
            status, payload = 400, {"error": "bad request"}
        else:
            status, payload = route(namespace, request_line[0], request_line[1])
    except Exception as error:
        LOG.exception("admin request failed")
        status, payload = 500, {"error": str(error)}
    body = json.dumps(payload, indent=1).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}.get(
        status, "Error"
    )
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
    )
    writer.write(head.encode() + b"Connection: close\r\n\r\n" + body)
    try:
        await writer.drain()
    finally:
        writer.close()


async def start_admin(namespace: Namespace, host: str, port: int) -> asyncio.Server:
    return await asyncio.start_server(lambda r, w: serve_client(namespace, r, w), host, port)
