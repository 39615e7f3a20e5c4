"""Problem mapping of the error tree, and the backlog gate."""

from __future__ import annotations

import json

import pytest

from shared.adapters.in_memory import FixedBacklog
from shared.entrypoints.http.problems import problem_for
from shared.errors import (
    ConfigurationError,
    Conflict,
    FieldError,
    InferbusError,
    InvalidInput,
    ModelNotAllowed,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    TransientError,
    Unauthenticated,
    UnknownModel,
    UnsupportedMediaType,
)
from shared.intake.backpressure import BacklogGate
from shared.intake.ports import QueueDepth


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (InvalidInput("bad"), 400),
        (Unauthenticated("who"), 401),
        (NotFound("gone"), 404),
        (Conflict("busy", code="x"), 409),
        (PayloadTooLarge("big"), 413),
        (UnsupportedMediaType("xml"), 415),
        (UnknownModel("gpt-9"), 422),
        (ModelNotAllowed("trial may not use gpt-9"), 403),
        (ConfigurationError("oops"), 500),
        (TransientError("later"), 503),
        (ServiceUnavailable("full", retry_after=7), 503),
    ],
)
def test_each_error_kind_has_its_status(error: InferbusError, status: int) -> None:
    problem = problem_for(error)
    assert problem.status == status
    document = json.loads(problem.body())
    assert document["status"] == status
    assert document["type"].startswith("urn:inferbus:problem:")


def test_transient_problems_always_say_when_to_retry() -> None:
    assert problem_for(TransientError("x")).headers["Retry-After"] == "5"
    assert problem_for(ServiceUnavailable("x", retry_after=7.4)).headers["Retry-After"] == "7"


def test_field_errors_are_listed_and_server_errors_hide_details() -> None:
    invalid = json.loads(problem_for(InvalidInput("bad", (FieldError("a.b", "wrong"),))).body())
    assert invalid["errors"] == [{"field": "a.b", "message": "wrong"}]
    secret = json.loads(problem_for(ConfigurationError("key=abc is wrong")).body())
    assert "abc" not in secret["detail"]


def test_the_gate_opens_below_the_limit_and_closes_at_it() -> None:
    probe = FixedBacklog(depth=9)
    BacklogGate(probe, limit=10, cache_seconds=0, retry_after=5).check()
    probe.depth = 10
    with pytest.raises(ServiceUnavailable) as closed:
        BacklogGate(probe, limit=10, cache_seconds=0, retry_after=5).check()
    assert closed.value.retry_after == 5


def test_the_gate_fails_open_when_the_depth_cannot_be_read_and_remembers_that() -> None:
    class Broken:
        calls = 0

        def queue_depth(self) -> QueueDepth:
            self.calls += 1
            raise OSError("management endpoint down")

    broken = Broken()
    gate = BacklogGate(broken, limit=1, cache_seconds=60, retry_after=5)
    for _ in range(5):
        gate.check()
    assert broken.calls == 1, "an unreachable endpoint is tried once per cache period"


def test_a_zero_limit_disables_the_gate_without_reading() -> None:
    probe = FixedBacklog(depth=10**6)
    BacklogGate(probe, limit=0, cache_seconds=0, retry_after=5).check()
    assert probe.reads == 0


def test_what_this_instance_sent_counts_until_the_next_reading_sees_it() -> None:
    probe = FixedBacklog(depth=8)
    gate = BacklogGate(probe, limit=10, cache_seconds=60, retry_after=5)
    gate.check()
    gate.sent()
    gate.check()  # 9: the cached 8 and the one sent since
    gate.sent()
    with pytest.raises(ServiceUnavailable, match="backlog is 10 messages"):
        gate.check()  # the cache still says 8; the two sent since make 10
    assert probe.reads == 1
    fresh = BacklogGate(probe, limit=10, cache_seconds=0, retry_after=5)
    fresh.sent()
    fresh.check()  # a new reading replaces what was counted: the broker counts it now
    assert fresh.depth() == QueueDepth(8)
