"""Generated requests to every HTTP route the app registers, through the local host.

Routes (triggers/http_api.py, triggers/event_doors.py): ``POST /api/v1/requests``,
``GET /api/v1/requests/{id}``, ``GET /api/v1/requests/{id}/result``,
``DELETE /api/v1/requests/{id}``, ``GET`` and ``DELETE /api/v1/batches/{id}``, ``POST``
and ``OPTIONS /api/v1/events``, and ``GET /api/openapi.json``. The properties
are in ``properties.py``; the last test checks that every request accepted during the
run has its message (it ends, or its message waits in a queue).
"""

from __future__ import annotations

import json
import time

import pytest
from azure.servicebus import ServiceBusClient
from hypothesis import HealthCheck, given, settings

from tests.e2e.conftest import Stack
from tests.fuzz.conftest import examples_per_route
from tests.fuzz.event_strategies import deliveries, handshakes
from tests.fuzz.properties import (
    Accepted,
    AcceptedRequest,
    check_answer,
    check_delivery_accepted,
    check_submission_accepted,
    send,
)
from tests.fuzz.strategies import Call, lookups, openapi_fetches, submissions

pytestmark = pytest.mark.fuzz

TERMINAL = {"completed", "failed", "expired", "cancelled"}
REQUEST_QUEUES = ("inference-requests", "inference-priority", "inference-ordered")
MESSAGE_WAIT_S = 60.0

fuzz_settings = settings(
    max_examples=examples_per_route(),
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
        HealthCheck.large_base_example,
    ],
)


@fuzz_settings
@given(call=submissions())
def test_submitting_requests(fuzz_stack: Stack, accepted: Accepted, call: Call) -> None:
    status, headers, body = send(fuzz_stack, call)
    check_answer(call, status, headers, body)
    check_submission_accepted(fuzz_stack, call, status, body, accepted)


@fuzz_settings
@given(call=lookups())
def test_looking_up_and_cancelling_requests(fuzz_stack: Stack, call: Call) -> None:
    status, headers, body = send(fuzz_stack, call)
    check_answer(call, status, headers, body)


@fuzz_settings
@given(call=deliveries())
def test_event_deliveries(fuzz_stack: Stack, accepted: Accepted, call: Call) -> None:
    status, headers, body = send(fuzz_stack, call)
    check_answer(call, status, headers, body)
    check_delivery_accepted(fuzz_stack, call, status, body, accepted)


@fuzz_settings
@given(call=handshakes())
def test_webhook_handshakes(fuzz_stack: Stack, call: Call) -> None:
    status, headers, body = send(fuzz_stack, call)
    check_answer(call, status, headers, body)
    # HTTP drops the whitespace around a field value (RFC 9110 5.5): " x " arrives as "x".
    origin = call.headers.get("WebHook-Request-Origin", "").strip(" \t")
    if status == 200:
        assert origin, "a handshake without an origin was answered 200"
        allowed = next(v for k, v in headers.items() if k.lower() == "webhook-allowed-origin")
        assert allowed == origin


@fuzz_settings
@given(call=openapi_fetches())
def test_fetching_the_openapi_document(fuzz_stack: Stack, call: Call) -> None:
    status, headers, body = send(fuzz_stack, call)
    check_answer(call, status, headers, body)
    if status == 200:
        assert "openapi" in json.loads(body), "the OpenAPI document names no version"


def _status(stack: Stack, request: AcceptedRequest) -> str:
    code, _, raw = stack.request(
        "GET", f"/api/v1/requests/{request.request_id}", None, request.lookup
    )
    return str(json.loads(raw)["status"]) if code == 200 else f"http {code}"


def _queued_ids(stack: Stack) -> set[str]:
    """Request ids with a message in a request queue (active, locked, deferred, scheduled)
    or a dead-letter queue. The ordered lane's queue needs a session to peek (it would
    take a session lock from the host): only its dead-letter queue is looked at."""
    found: set[str] = set()
    entities: list[tuple[str, str | None]] = [
        (q, None) for q in REQUEST_QUEUES if q != "inference-ordered"
    ]
    entities += [(q, "deadletter") for q in REQUEST_QUEUES]
    with ServiceBusClient.from_connection_string(stack.servicebus_connection_string) as bus:
        for queue, sub_queue in entities:
            with bus.get_queue_receiver(queue, sub_queue=sub_queue) as receiver:
                page = receiver.peek_messages(max_message_count=1000, sequence_number=0)
                # a retry copy's message id is "<request id>:retry:<n>"
                found |= {str(m.message_id).split(":retry:")[0] for m in page}
    return found


def test_every_accepted_request_has_its_message(fuzz_stack: Stack, accepted: Accepted) -> None:
    """Runs after the route tests (file order). Accepted requests are due within seconds
    (the generated ``not_before`` values are), so each must end within the wait: only its
    message can take a job out of ``accepted``. One that has not ended is lost unless its
    message is still in a queue (it would be slow, not lost)."""
    pending = {r.request_id: r for r in accepted.requests}
    statuses: dict[str, str] = {}
    deadline = time.monotonic() + MESSAGE_WAIT_S
    while pending:
        for request_id, request in list(pending.items()):
            statuses[request_id] = _status(fuzz_stack, request)
            if statuses[request_id] in TERMINAL:
                del pending[request_id]
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(1.0)
    queued = _queued_ids(fuzz_stack) if pending else set()
    lost = {r: statuses.get(r) for r in pending if r not in queued}
    assert not lost, f"accepted, not ended, and no message in any queue: {lost}"
