"""The pull door's settlement rules over an in-memory queue subscription (our own port).

The wire protocol is tested against the namespace emulator through the real SDK in
tests/integration/test_eventgrid_pull.py; here each rule of ``shared.events.pull``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from shared.contracts import Door
from shared.events.ports import PulledEvent
from shared.events.pull import PullDoor, PullPolicy, release_delay
from tests.fakes import broker_down
from tests.support.events import requested_event
from tests.support.wiring import Wired, wire

TENANT = "contoso"


@dataclass
class ScriptedQueue:
    """Hands out the scripted batches, then nothing; records every settlement call."""

    batches: list[list[PulledEvent]]
    calls: list[tuple[str, tuple[str, ...], int]] = field(default_factory=list)
    lost: set[str] = field(default_factory=set)

    def receive(self, max_events: int, max_wait_seconds: int) -> list[PulledEvent]:
        return self.batches.pop(0)[:max_events] if self.batches else []

    def _record(self, action: str, tokens: list[str], delay: int = 0) -> list[str]:
        self.calls.append((action, tuple(tokens), delay))
        return [token for token in tokens if token in self.lost]

    def acknowledge(self, lock_tokens: list[str]) -> list[str]:
        return self._record("acknowledge", lock_tokens)

    def release(self, lock_tokens: list[str], delay_seconds: int) -> list[str]:
        return self._record("release", lock_tokens, delay_seconds)

    def reject(self, lock_tokens: list[str]) -> list[str]:
        return self._record("reject", lock_tokens)

    def renew_locks(self, lock_tokens: list[str]) -> list[str]:
        return self._record("renew", lock_tokens)


def pulled(token: str, event: Any, delivery_count: int = 1) -> PulledEvent:
    return PulledEvent(lock_token=token, delivery_count=delivery_count, cloud_event=event)


def door(wired: Wired, queue: ScriptedQueue, **policy: Any) -> PullDoor:
    return PullDoor(queue, wired.services.event_intake, PullPolicy(**policy))


def test_accepted_and_duplicate_events_are_acknowledged_in_one_call() -> None:
    wired = wire()
    event = requested_event(TENANT, "evt-1")
    queue = ScriptedQueue(
        [[pulled("a", event), pulled("b", event), pulled("c", requested_event(TENANT))]]
    )

    report = door(wired, queue).drain()

    assert queue.calls == [("acknowledge", ("a", "b", "c"), 0)]
    assert report.outcomes == Counter({"accepted": 2, "duplicate": 1})
    assert len(wired.queue.sent) == 2, "the redelivered event made no second request"


def test_malformed_and_invalid_events_are_rejected() -> None:
    wired = wire()
    not_a_cloud_event = {"id": "x", "type": "com.inferbus.InferenceRequested"}
    bad_base64 = {**requested_event(TENANT), "data_base64": "%%%"}
    bad_base64.pop("data")
    invalid_data = requested_event(TENANT, input={"text": ""})
    queue = ScriptedQueue(
        [
            [
                pulled("m", not_a_cloud_event),
                pulled("b", bad_base64),
                pulled("i", invalid_data),
                pulled("ok", requested_event(TENANT)),
            ]
        ]
    )

    report = door(wired, queue).drain()

    assert sorted(queue.calls) == [("acknowledge", ("ok",), 0), ("reject", ("m", "b", "i"), 0)]
    assert report.outcomes == Counter({"rejected": 3, "accepted": 1})
    assert len(wired.queue.sent) == 1


def test_transient_failures_release_with_a_delay_growing_with_the_delivery_count() -> None:
    wired = wire()
    wired.queue.fail_with = broker_down()
    queue = ScriptedQueue(
        [[pulled("first", requested_event(TENANT)), pulled("third", requested_event(TENANT), 3)]]
    )

    report = door(wired, queue).drain()

    assert sorted(queue.calls) == [("release", ("first",), 10), ("release", ("third",), 600)]
    assert report.outcomes == Counter({"released": 2})
    assert [release_delay(n) for n in (0, 1, 2, 3, 4, 9)] == [10, 10, 60, 600, 3600, 3600]


def test_drain_reads_batches_until_an_empty_receive_and_counts_lost_locks() -> None:
    wired = wire()
    queue = ScriptedQueue(
        [[pulled("a", requested_event(TENANT))], [pulled("b", requested_event(TENANT))]],
        lost={"b"},
    )

    report = door(wired, queue).drain()

    assert report.received == 2
    assert queue.calls == [("acknowledge", ("a",), 0), ("acknowledge", ("b",), 0)]
    assert report.lost_locks == 1
    assert "received=2" in report.summary()


def test_the_drain_window_bounds_the_work_of_one_run() -> None:
    wired = wire()
    queue = ScriptedQueue([[pulled(str(n), requested_event(TENANT))] for n in range(5)])
    ticks = iter(range(100))

    report = PullDoor(
        queue, wired.services.event_intake, PullPolicy(drain_seconds=2), lambda: next(ticks)
    ).drain()

    assert report.received < 5, "the window closed before the queue was empty"
    assert queue.batches, "what was not received stays for the next run"


class SlowIntake:
    """The app's intake, taking ``seconds`` per event; notes the most events in at once."""

    def __init__(self, wired: Wired, seconds: float) -> None:
        self._intake = wired.services.event_intake
        self._seconds = seconds
        self._lock = threading.Lock()
        self._inside = 0
        self.most_at_once = 0

    def accept_event(self, event: Any, source: Door) -> Any:
        with self._lock:
            self._inside += 1
            self.most_at_once = max(self.most_at_once, self._inside)
        time.sleep(self._seconds)
        with self._lock:
            self._inside -= 1
        return self._intake.accept_event(event, source)


def test_locks_are_renewed_while_the_batch_is_in_intake() -> None:
    wired = wire()
    batch = [pulled("a", requested_event(TENANT)), pulled("b", requested_event(TENANT))]
    queue = ScriptedQueue([batch])
    policy = PullPolicy(lock_renewal_seconds=0.05, concurrency=1)

    PullDoor(queue, SlowIntake(wired, 0.2), policy).drain()  # type: ignore[arg-type]

    renewals = [call for call in queue.calls if call[0] == "renew"]
    assert renewals, "no renewal while intake took longer than the renewal interval"
    assert all(call[1] == ("a", "b") for call in renewals)
    assert queue.calls[-1] == ("acknowledge", ("a", "b"), 0)


def test_the_events_of_a_batch_go_through_intake_concurrently() -> None:
    wired = wire()
    queue = ScriptedQueue([[pulled(str(n), requested_event(TENANT)) for n in range(8)]])
    slow = SlowIntake(wired, 0.2)

    report = PullDoor(queue, slow, PullPolicy(concurrency=4)).drain()  # type: ignore[arg-type]

    assert report.outcomes == Counter({"accepted": 8})
    assert slow.most_at_once == 4
