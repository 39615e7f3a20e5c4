"""Per-lane backpressure through the wired intake (in-memory ports), and which probes the
adapters build from the settings."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from shared.adapters.in_memory import FixedBacklog
from shared.adapters.queue_counts import (
    EmulatorBacklogProbe,
    QueueBacklogProbe,
    lane_backlog_probes,
)
from shared.contracts import Priority
from shared.errors import ServiceUnavailable
from shared.inference.capacity import BudgetedModel, Pace
from shared.intake.backpressure import LaneBacklogGates, WaitAdmission
from shared.intake.submissions import InlineContent, Submission
from shared.lanes import Lane
from shared.settings import Settings
from tests.support.wiring import wire

EMULATOR = "Endpoint=sb://127.0.0.1:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true"


def submission(priority: Priority = Priority.NORMAL, document_id: str | None = None) -> Submission:
    return Submission(
        tenant_id="contoso",
        model="local-analyzer",
        content=InlineContent(b"a letter", "text/plain"),
        priority=priority,
        document_id=document_id,
    )


def test_each_submission_is_gated_by_its_own_lanes_depth_and_limit() -> None:
    standard, priority, ordered = FixedBacklog(10), FixedBacklog(3), FixedBacklog(0)
    wired = wire(
        MaxQueueBacklog="10",
        MaxPriorityQueueBacklog="4",
        MaxOrderedQueueBacklog="1",
        BacklogCacheSeconds="0",
        ports={
            "backlogs": {Lane.STANDARD: standard, Lane.PRIORITY: priority, Lane.ORDERED: ordered},
        },
    )
    intake = wired.services.http.requests.intake

    with pytest.raises(
        ServiceUnavailable, match="standard lane's request backlog is 10 messages \\(limit 10\\)"
    ):
        intake.submit(submission())
    intake.submit(submission(Priority.HIGH))  # admitted while standard is full
    intake.submit(submission(Priority.LOW, document_id="doc"))
    priority.depth = 4
    with pytest.raises(
        ServiceUnavailable, match="priority lane's request backlog is 4 messages \\(limit 4\\)"
    ):
        intake.submit(submission(Priority.HIGH))

    assert (standard.reads, priority.reads, ordered.reads) == (1, 2, 1)
    assert len(wired.queue.sent) == 2


def test_what_intake_sent_counts_between_two_readings_of_the_depth() -> None:
    standard = FixedBacklog(0)
    wired = wire(
        MaxQueueBacklog="2",
        BacklogCacheSeconds="60",
        ports={"backlogs": {Lane.STANDARD: standard}},
    )
    intake = wired.services.http.requests.intake
    intake.submit(submission())
    intake.submit(submission())
    with pytest.raises(ServiceUnavailable, match="backlog is 2 messages"):
        intake.submit(submission())  # one reading, of 0, and the two sent since
    assert standard.reads == 1
    assert len(wired.queue.sent) == 2


def test_a_lane_with_limit_zero_is_not_read() -> None:
    probe = FixedBacklog(10**6)
    wired = wire(MaxPriorityQueueBacklog="0", ports={"backlogs": {Lane.PRIORITY: probe}})
    wired.services.http.requests.intake.submit(submission(Priority.HIGH))
    assert probe.reads == 0


def settings(**values: str) -> Settings:
    return Settings.model_validate({"Storage": "UseDevelopmentStorage=true", **values})


def test_each_gated_lane_gets_a_probe_of_its_own_queue() -> None:
    chosen = settings(
        ServiceBusConnection=EMULATOR,
        ServiceBusRuntimeCountsUrl="http://127.0.0.1:5300/runtime",
        MaxQueueBacklog="5",
        MaxPriorityQueueBacklog="5",
        MaxOrderedQueueBacklog="0",
    )
    lanes = lane_backlog_probes(chosen)
    assert isinstance(lanes[Lane.STANDARD], EmulatorBacklogProbe)
    assert set(lanes) == {Lane.STANDARD, Lane.PRIORITY}
    assert isinstance(lanes[Lane.PRIORITY], EmulatorBacklogProbe)
    azure = settings(
        **{"ServiceBusConnection__fullyQualifiedNamespace": "ns.servicebus.windows.net"},
        MaxPriorityQueueBacklog="5",
    )
    assert isinstance(lane_backlog_probes(azure)[Lane.PRIORITY], QueueBacklogProbe)


def test_an_emulator_without_a_counts_url_gates_no_lane() -> None:
    chosen = settings(ServiceBusConnection=EMULATOR, MaxQueueBacklog="5")
    assert lane_backlog_probes(chosen) == {}


def test_a_request_whose_deadline_comes_before_its_expected_wait_is_refused(
    tmp_path: Path,
) -> None:
    catalog = tmp_path / "models.json"
    catalog.write_text(
        json.dumps(
            {"models": {"local-analyzer": {"provider": "local", "task": "document-analysis",
                                           "capacity": {"tokens_per_minute": 6_000}}}}
        )
    )  # fmt: skip
    standard, priority = FixedBacklog(100), FixedBacklog(5)
    wired = wire(
        ModelCatalog=str(catalog),
        MaxQueueBacklog="5000",  # the depth limits are a ceiling far above
        MaxPriorityQueueBacklog="1000",
        BacklogCacheSeconds="0",
        ports={"backlogs": {Lane.STANDARD: standard, Lane.PRIORITY: priority}},
    )
    intake = wired.services.http.requests.intake
    # Before any answer a request counts what its own prompt does (the task's instructions
    # and its text: 376 characters, 94 tokens); at 100 tokens a second the 105 messages
    # ahead of a normal request, and it, take about 100 s.
    with pytest.raises(ServiceUnavailable, match=r"about 100 s .* deadline \(120 s\)") as late:
        intake.submit(replace(submission(), deadline_seconds=120))
    assert late.value.retry_after == 100
    assert not wired.queue.sent, "nothing was accepted"
    # The wait must fit in two thirds of the deadline: 99.6 s does not fit in 149 s.
    with pytest.raises(ServiceUnavailable, match=r"too close to this request's deadline"):
        intake.submit(replace(submission(), deadline_seconds=149))
    intake.submit(replace(submission(), deadline_seconds=150))
    intake.submit(replace(submission(Priority.HIGH), deadline_seconds=60))  # 6 ahead: 7 s
    assert len(wired.queue.sent) == 2
    priority.scheduled = 40  # messages given back wait as scheduled copies: still ahead
    with pytest.raises(ServiceUnavailable, match="priority lane's backlog takes about 43 s"):
        intake.submit(replace(submission(Priority.HIGH), deadline_seconds=60))  # 46 ahead
    priority.scheduled = 0
    priority.depth = 60
    with pytest.raises(ServiceUnavailable, match="priority lane's backlog takes about 57 s"):
        intake.submit(replace(submission(Priority.HIGH), deadline_seconds=80))
    # Once the model has answered, a request costs what its calls have cost.
    client = wired.services.models["local-analyzer"].client
    assert isinstance(client, BudgetedModel)
    client.calls.learn(1_000)
    with pytest.raises(ServiceUnavailable, match="priority lane's backlog takes about 610 s"):
        intake.submit(replace(submission(Priority.HIGH), deadline_seconds=900))


class SteadyPace:
    """A deployment of 6,000 tokens a minute, 600 tokens a request (``ModelPace``)."""

    def __init__(self, high_share: float) -> None:
        self.high_share = high_share

    def pace(self, model: str, text_chars: int | None = None, parameters: object = None) -> Pace:
        return Pace(6_000, 600, self.high_share)


def test_high_priority_arriving_meanwhile_lengthens_the_other_lanes_waits() -> None:
    gates = LaneBacklogGates.of(
        {Lane.STANDARD: FixedBacklog(9), Lane.PRIORITY: FixedBacklog(0)},
        {Lane.STANDARD: 5_000, Lane.PRIORITY: 1_000},
        cache_seconds=0,
        retry_after=5,
    )
    alone = WaitAdmission(gates, SteadyPace(0.0))
    assert alone.expected_wait(Lane.STANDARD, "m") == pytest.approx(60.0), "10 requests, 6 s each"
    # High priority took a quarter of the deployment lately: it keeps doing so while a
    # normal request waits, so its backlog clears at three quarters of the pace.
    shared = WaitAdmission(gates, SteadyPace(0.25))
    assert shared.expected_wait(Lane.STANDARD, "m") == pytest.approx(80.0)
    assert shared.expected_wait(Lane.PRIORITY, "m") == pytest.approx(6.0), "nothing overtakes"
    shared.check(Lane.STANDARD, "m", 121)
    with pytest.raises(ServiceUnavailable, match="about 80 s") as refused:
        shared.check(Lane.STANDARD, "m", 119)
    assert refused.value.retry_after == 80
    endless = WaitAdmission(gates, SteadyPace(1.0))
    assert endless.expected_wait(Lane.STANDARD, "m") == pytest.approx(600.0), "at most 90%"


def test_a_cached_reading_counts_what_has_gone_to_the_model_since() -> None:
    seconds = [0.0]
    gates = LaneBacklogGates.of(
        {Lane.STANDARD: FixedBacklog(9), Lane.PRIORITY: FixedBacklog(0)},
        {Lane.STANDARD: 5_000, Lane.PRIORITY: 1_000},
        cache_seconds=60,
        retry_after=5,
        monotonic=lambda: seconds[0],
    )
    admission = WaitAdmission(gates, SteadyPace(0.0))  # a request every 6 s
    assert admission.expected_wait(Lane.STANDARD, "m") == pytest.approx(60.0)
    gates.sent(Lane.STANDARD)
    assert admission.expected_wait(Lane.STANDARD, "m") == pytest.approx(66.0), "one more ahead"
    seconds[0] = 12.0  # two of the nine counted have gone on since; the one sent has not
    assert admission.expected_wait(Lane.STANDARD, "m") == pytest.approx(54.0)
    seconds[0] = 59.0  # no more can have gone than the reading counted
    assert admission.expected_wait(Lane.STANDARD, "m") == pytest.approx(12.0)
