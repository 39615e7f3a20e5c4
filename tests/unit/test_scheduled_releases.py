"""Two tenants' bursts released by weight, and the call-back that sends a tenant's
scheduled work sooner once the other's is all released (``TenantShares.release_delay``
and ``respace``, ``shared.intake.releases.ScheduledReleases``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.adapters.in_memory import RecordingSender
from shared.errors import TransientError
from shared.inference.capacity import Release
from shared.inference.tenant_shares import TenantShares
from shared.intake.releases import ScheduledReleases
from shared.messaging import OutgoingMessage, Scheduled

WEIGHTS = {"gold": 3.0, "bronze": 1.0}
RATE, HORIZON = 100.0, 10.0  # tokens a second; seconds of a tenant's work in the queue


def weights(tenant: str) -> float:
    return WEIGHTS.get(tenant, 1.0)


# --- the schedule ---------------------------------------------------------------------------


def test_a_tenant_alone_is_released_at_the_whole_rate() -> None:
    shares = TenantShares(weight_of=weights)
    delays = [shares.release_delay("bronze", 500, RATE, HORIZON, now=0.0) for _ in range(5)]
    assert delays == pytest.approx([0.0, 0.0, 0.0, 5.0, 10.0])


def test_two_bursts_arriving_together_are_released_by_weight() -> None:
    shares = TenantShares(weight_of=weights)
    gold: list[float] = []
    bronze: list[float] = []
    for _ in range(40):  # interleaved, one request each at a time
        gold.append(shares.release_delay("gold", 300, RATE, HORIZON, now=0.0))
        bronze.append(shares.release_delay("bronze", 300, RATE, HORIZON, now=0.0))
    # Once both hold scheduled work, gold gets three quarters of the rate and bronze one.
    gold_step = gold[-1] - gold[-2]
    bronze_step = bronze[-1] - bronze[-2]
    assert gold_step == pytest.approx(300 / 75)
    assert bronze_step == pytest.approx(300 / 25)
    # What reaches the queue in a minute past the first seconds: 15 of gold's, 5 of bronze's.
    in_a_minute = sum(10 < d <= 70 for d in gold), sum(10 < d <= 70 for d in bronze)
    assert in_a_minute == (15, 5)


def test_a_trickle_sent_at_once_is_no_ones_contender() -> None:
    shares = TenantShares(weight_of=weights)
    for second in range(0, 30, 3):  # bronze's trickle: one request every 3 s
        assert shares.release_delay("bronze", 300, RATE, HORIZON, now=float(second)) == 0.0
        shares.release_delay("gold", 300, RATE, HORIZON, now=float(second))
    delays = [shares.release_delay("gold", 300, RATE, HORIZON, now=30.0) for _ in range(10)]
    assert delays[-1] - delays[-2] == pytest.approx(3.0), "gold keeps the whole rate"


def test_respacing_gives_the_tenant_left_the_whole_rate_and_a_newcomer_its_part() -> None:
    shares = TenantShares(weight_of=weights)
    for _ in range(20):
        shares.release_delay("gold", 300, RATE, HORIZON, now=0.0)
        shares.release_delay("bronze", 300, RATE, HORIZON, now=0.0)
    assert shares.release_delay("bronze", 300, RATE, HORIZON, now=0.0) > 100.0
    # Gold's scheduled work is all released: bronze's is spaced at the whole rate.
    spaced = shares.respace({"bronze": [300] * 5}, RATE, HORIZON, now=100.0)
    assert spaced["bronze"] == pytest.approx([0.0, 3.0, 6.0, 9.0, 12.0])
    # Its line now ends where the respaced work ends (125 s), and gold, whose scheduled work
    # is gone, is no contender: the next request follows at the whole rate.
    assert shares.release_delay("bronze", 300, RATE, HORIZON, now=100.0) == pytest.approx(15.0)
    assert shares.release_delay("bronze", 300, RATE, HORIZON, now=100.0) == pytest.approx(18.0)
    # Gold's next burst begins: bronze's scheduled work is spaced at its quarter, later.
    spaced = shares.respace({"gold": [300], "bronze": [300] * 3}, RATE, HORIZON, now=100.0)
    assert spaced["bronze"] == pytest.approx([0.0, 12.0, 24.0])
    assert spaced["gold"] == pytest.approx([0.0])
    assert shares.release_delay("bronze", 300, RATE, HORIZON, now=100.0) == pytest.approx(36.0)


# --- the call-back --------------------------------------------------------------------------


@dataclass
class Clock:
    now: datetime = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class AlonePacing:
    """A ``TenantPacing`` whose respacing is given (the gate's arithmetic is above): a
    tenant left alone gets its ``alone`` delay, work beside another tenant keeps its own,
    or in ``beside`` seconds a request when given."""

    alone: dict[str, float] = field(default_factory=dict)
    beside: dict[str, float] = field(default_factory=dict)
    asked: list[list[Release]] = field(default_factory=list)

    def release_delay(self, tenant: str, model: str, text_chars: int, parameters: Any) -> float:
        return 0.0

    def pacing_key(self, model: str) -> str:
        return "deployment"

    def respace(self, releases: Sequence[Release]) -> list[float]:
        self.asked.append(list(releases))
        tenants = {r.tenant for r in releases}
        if len(tenants) == 1:
            return [self.alone.get(r.tenant, r.delay) for r in releases]
        counts: dict[str, int] = {}
        delays = []
        for r in releases:
            counts[r.tenant] = counts.get(r.tenant, 0) + 1
            step = self.beside.get(r.tenant)
            delays.append(r.delay if step is None else step * counts[r.tenant])
        return delays


def message(request_id: str, due: datetime) -> OutgoingMessage:
    return OutgoingMessage(
        body=b"{}", message_id=request_id, correlation_id=request_id,
        scheduled_enqueue_time=due, application_properties={"tenant": "t"},
    )  # fmt: skip


def hold(
    releases: ScheduledReleases, clock: Clock, tenant: str, request_id: str, in_s: float
) -> None:
    due = clock() + timedelta(seconds=in_s)
    releases.schedule(message(request_id, due), tenant=tenant, model="gpt",
                      text_chars=100, parameters={})  # fmt: skip


@pytest.fixture
def clock() -> Clock:
    return Clock()


def ids(queue: RecordingSender) -> list[str]:
    return [m.message_id for m in queue.live()]


def test_when_one_tenants_scheduled_work_is_released_the_others_comes_sooner(
    clock: Clock,
) -> None:
    queue, pacing = RecordingSender(), AlonePacing(alone={"bronze": 3.0})
    releases = ScheduledReleases(queue, pacing, clock)
    hold(releases, clock, "gold", "g1", 5)
    hold(releases, clock, "bronze", "b1", 40)
    hold(releases, clock, "bronze", "b2", 80)
    assert releases.look() == 0, "both tenants' work is where their parts put it"
    assert releases.look() == 0
    assert len(pacing.asked) == 1, "nothing changed since: nothing is asked"

    clock.advance(6)  # gold's last request has reached the queue
    assert releases.look() == 2
    asked = pacing.asked[-1]
    assert [(r.tenant, r.delay) for r in asked] == [("bronze", 34.0), ("bronze", 74.0)]
    copies = queue.sent[3:]
    assert [c.message_id for c in copies] == ["b1:release:1", "b2:release:1"]
    assert all(c.scheduled_enqueue_time == clock() + timedelta(seconds=3) for c in copies)
    assert queue.cancelled == [2, 3], "the earlier copies are called back, after the new ones"
    assert ids(queue) == ["g1", "b1:release:1", "b2:release:1"]
    assert releases.held() == 2
    assert releases.look() == 0, "nothing changed since"


def test_a_tenant_that_starts_a_burst_takes_its_part_from_one_released_alone(
    clock: Clock,
) -> None:
    queue = RecordingSender()
    releases = ScheduledReleases(queue, AlonePacing(beside={"bronze": 40.0}), clock)
    for n in range(1, 4):  # bronze alone: at the whole rate, 10 s a request
        hold(releases, clock, "bronze", f"b{n}", 10 * n)
    assert releases.look() == 0
    hold(releases, clock, "gold", "g1", 10)  # gold's burst begins: bronze gets its part
    assert releases.look() == 3
    later = [m.scheduled_enqueue_time for m in queue.live() if m.message_id.startswith("b")]
    assert later == [clock() + timedelta(seconds=40 * n) for n in range(1, 4)]


def test_a_small_change_or_a_message_about_to_come_due_is_left(clock: Clock) -> None:
    queue = RecordingSender()
    releases = ScheduledReleases(queue, AlonePacing(alone={"bronze": 0.0}), clock)
    hold(releases, clock, "gold", "g1", 1)
    hold(releases, clock, "bronze", "b1", 3)  # due in 1.5 s at the look: about to go
    hold(releases, clock, "bronze", "b2", 7)  # 5.5 s sooner: the least change is 5 s
    hold(releases, clock, "bronze", "b3", 6)  # 4.5 s sooner: not worth two operations
    releases.look()
    clock.advance(1.5)
    assert releases.look() == 1
    assert ids(queue) == ["g1", "b1", "b3", "b2:release:1"]


def test_a_copy_the_broker_refuses_leaves_the_message_and_is_tried_again(clock: Clock) -> None:
    queue = RecordingSender()
    releases = ScheduledReleases(queue, AlonePacing(alone={"bronze": 0.0}), clock)
    hold(releases, clock, "gold", "g1", 1)
    hold(releases, clock, "bronze", "b1", 60)
    releases.look()
    clock.advance(2)
    queue.fail_with = TransientError("busy")
    assert releases.look() == 0
    assert queue.cancelled == []
    queue.fail_with = None
    assert releases.look() == 1, "the next look tries again"
    assert ids(queue) == ["g1", "b1:release:1"]


def test_a_cancel_refused_together_is_tried_one_by_one_and_a_due_one_arrives_twice(
    clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    @dataclass
    class OneCameDue(RecordingSender):
        def cancel(self, scheduled: Sequence[Scheduled]) -> None:
            if any(s.sequence_number == 2 for s in scheduled):
                raise TransientError("message 2 is no longer scheduled")
            super().cancel(scheduled)

    queue = OneCameDue()
    releases = ScheduledReleases(queue, AlonePacing(alone={"bronze": 0.0}), clock)
    hold(releases, clock, "gold", "g1", 1)
    hold(releases, clock, "bronze", "b1", 60)
    hold(releases, clock, "bronze", "b2", 70)
    releases.look()
    clock.advance(2)
    assert releases.look() == 2
    assert queue.cancelled == [3]
    assert ids(queue) == ["g1", "b1", "b1:release:1", "b2:release:1"]
    assert "1 scheduled requests sent again" in caplog.text
