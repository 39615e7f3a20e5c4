"""What the chaos run observes afterwards, through the interfaces a user has.

Job states through the status API, result messages on the results topic's ``audit``
subscription (every result), result events on the Event Grid namespace topic the app
publishes to, and the request queues' dead letters (peeked, left in place).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from azure.core.credentials import AzureKeyCredential
from azure.eventgrid import EventGridConsumerClient
from azure.servicebus import ServiceBusClient

from tests.chaos.traffic import Sent, http_call

TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
COMPLETED_EVENT = "com.inferbus.InferenceCompleted"
REQUEST_QUEUES = ("inference-requests", "inference-priority", "inference-ordered")


@dataclass(frozen=True)
class DeadLetter:
    queue: str
    reason: str | None
    description: str | None


def job_status(base_url: str, key: str, sent: Sent) -> str:
    """The job's status, ``missing`` (404) or ``http <code>`` for anything else."""
    status, raw = http_call(base_url, key, "GET", f"/api/v1/requests/{sent.request_id}",
                            tenant=sent.tenant)  # fmt: skip
    if status == 200:
        return str(json.loads(raw)["status"])
    return "missing" if status == 404 else f"http {status}"


def wait_until_terminal(
    base_url: str, key: str, requests: Iterable[Sent], timeout: float
) -> dict[str, str]:
    """Poll every request's job until all are terminal or ``timeout`` ends; the last
    status of each (request id -> status)."""
    pending = {s.request_id: s for s in requests if s.has_job}
    last: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while pending:
        for request_id, sent in list(pending.items()):
            last[request_id] = job_status(base_url, key, sent)
            if last[request_id] in TERMINAL:
                del pending[request_id]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    return last


def result_messages(connection_string: str, quiet_s: float = 3.0) -> dict[str, list[str]]:
    """The ``status`` of each result message per request id on the ``audit`` subscription
    (it takes every result), read and completed until none has come for ``quiet_s``."""
    found: dict[str, list[str]] = {}
    with (
        ServiceBusClient.from_connection_string(connection_string) as bus,
        bus.get_subscription_receiver("inference-results", "audit") as receiver,
    ):
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < quiet_s:
            batch = receiver.receive_messages(max_message_count=100, max_wait_time=1)
            for message in batch:
                body = json.loads(b"".join(message.body))
                found.setdefault(str(body["request_id"]), []).append(str(body["status"]))
                receiver.complete_message(message)
            if batch:
                quiet_since = time.monotonic()
    return found


def result_events(endpoint: str, key: str) -> dict[str, list[tuple[str, str]]]:
    """(type, id) of each event per request id (the last segment of the subject) on the
    namespace topic ``inference-results``, acknowledged until a receive comes back empty
    (it waits 10 s, the service's shortest wait)."""
    found: dict[str, list[tuple[str, str]]] = {}
    with EventGridConsumerClient(
        endpoint,
        AzureKeyCredential(key),
        namespace_topic="inference-results",
        subscription="results-pull",
    ) as consumer:
        while received := consumer.receive(max_events=100, max_wait_time=10):
            for detail in received:
                request_id = str(detail.event.subject or "").rsplit("/", 1)[-1]
                found.setdefault(request_id, []).append((detail.event.type, detail.event.id))
            consumer.acknowledge(lock_tokens=[d.broker_properties.lock_token for d in received])
    return found


def request_id_of(message_id: str) -> str:
    """The request a message is about: a retry copy's id is ``<request id>:retry:<n>``."""
    return message_id.split(":retry:", 1)[0]


def dead_letters(connection_string: str) -> dict[str, list[DeadLetter]]:
    """Every dead-lettered request message by request id (peeked from each lane's DLQ)."""
    found: dict[str, list[DeadLetter]] = {}
    with ServiceBusClient.from_connection_string(connection_string) as bus:
        for queue in REQUEST_QUEUES:
            with bus.get_queue_receiver(queue, sub_queue="deadletter") as receiver:
                sequence = 0
                while True:
                    page = receiver.peek_messages(max_message_count=250, sequence_number=sequence)
                    for message in page:
                        request_id = request_id_of(str(message.message_id))
                        found.setdefault(request_id, []).append(
                            DeadLetter(
                                queue,
                                message.dead_letter_reason,
                                message.dead_letter_error_description,
                            )
                        )
                    if not page:
                        break
                    sequence = max(m.sequence_number or 0 for m in page) + 1
    return found
