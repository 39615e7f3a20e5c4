"""Idempotency-Key claims, replays, conflicts and stale-marker takeover."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.in_memory import InMemoryDocuments
from shared.contracts import Job
from shared.errors import ConcurrencyConflict, Conflict, InvalidInput
from shared.intake.idempotency import (
    STALE_CLAIM_SECONDS,
    Claimed,
    DocumentIdempotencyStore,
    IdempotencyGuard,
    Replay,
    hash_key,
)
from tests.fakes import ManualClock


def new_store() -> DocumentIdempotencyStore:
    """Markers as documents in a fresh in-memory account."""
    return DocumentIdempotencyStore(InMemoryDocuments(), "idempotency")


def job_of(tenant: str, request_id: str) -> Job:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return Job(
        id=request_id,
        tenant_id=tenant,
        model="local-analyzer",
        correlation_id="c",
        created_at=now,
        updated_at=now,
    )


def guard(
    store: DocumentIdempotencyStore,
    clock: ManualClock,
    accepted: set[tuple[str, str]] | None = None,
) -> IdempotencyGuard:
    """A guard for which the requests in ``accepted`` have jobs (none by default)."""
    known = accepted or set()
    return IdempotencyGuard(
        store,
        accepted=lambda tenant, request_id: (
            job_of(tenant, request_id) if (tenant, request_id) in known else None
        ),
        clock=clock,
        wait_seconds=0.2,
        stale_after_seconds=60,
        sleep=lambda _: None,
    )


def test_first_claim_wins_and_its_job_makes_later_ones_replay() -> None:
    store, clock = new_store(), ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    first = guard(store, clock).begin("t", "key", "hash-a")
    assert isinstance(first, Claimed)
    assert first.record.request_id.count("-") == 4

    jobs = {("t", first.record.request_id)}
    again = guard(store, clock, jobs).begin("t", "key", "hash-a")
    assert again == Replay(job_of("t", first.record.request_id))


def test_a_different_body_with_the_same_key_conflicts() -> None:
    store, clock = new_store(), ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    claim = guard(store, clock).begin("t", "key", "hash-a")
    assert isinstance(claim, Claimed)
    with pytest.raises(Conflict) as conflict:
        guard(store, clock).begin("t", "key", "hash-b")
    assert conflict.value.code == "idempotency_key_reused"


def test_a_pending_claim_makes_others_wait_then_409_with_retry_after() -> None:
    store, clock = new_store(), ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    assert isinstance(guard(store, clock).begin("t", "key", "h"), Claimed)
    with pytest.raises(Conflict) as conflict:
        guard(store, clock).begin("t", "key", "h")
    assert conflict.value.code == "idempotency_key_in_progress"
    assert conflict.value.retry_after == 1


def test_release_frees_the_key_for_a_new_request() -> None:
    store, clock = new_store(), ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    first = guard(store, clock).begin("t", "key", "h")
    assert isinstance(first, Claimed)
    guard(store, clock).release(first)
    second = guard(store, clock).begin("t", "key", "h")
    assert isinstance(second, Claimed)
    assert second.record.request_id != first.record.request_id


def test_a_stale_pending_claim_is_taken_over_with_the_same_request_id() -> None:
    store, clock = new_store(), ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    crashed = guard(store, clock).begin("t", "key", "h")
    assert isinstance(crashed, Claimed)
    clock.now += timedelta(seconds=61)
    takeover = guard(store, clock).begin("t", "key", "h")
    assert isinstance(takeover, Claimed)
    assert takeover.record.request_id == crashed.record.request_id
    with pytest.raises(ConcurrencyConflict):
        guard(store, clock).release(crashed)  # the crashed owner's ETag is out of date


def test_a_claim_whose_job_exists_is_not_taken_over_however_old() -> None:
    store, clock = new_store(), ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    first = guard(store, clock).begin("t", "key", "h")
    assert isinstance(first, Claimed)
    clock.now += timedelta(days=1)
    jobs = {("t", first.record.request_id)}
    replay = guard(store, clock, jobs).begin("t", "key", "h")
    assert replay == Replay(job_of("t", first.record.request_id))


@pytest.mark.parametrize("key", ["", "with space", "é", "x" * 256])
def test_malformed_keys_are_invalid_input(key: str) -> None:
    with pytest.raises(InvalidInput):
        hash_key(key)


def test_keys_hash_to_fixed_length_names() -> None:
    assert len(hash_key("a")) == len(hash_key("b" * 255)) == 64


def test_a_crashed_intake_holds_its_key_at_most_thirty_seconds() -> None:
    """A claim whose owner died before recording a job: a retry 29 s later is told to
    come back; one after 30 s takes the claim over, with the same request id, so the job
    and the message stay single."""
    store, clock = new_store(), ManualClock(datetime(2026, 1, 1, tzinfo=UTC))

    def defaults() -> IdempotencyGuard:
        return IdempotencyGuard(store, accepted=lambda *_: None, clock=clock,
                                wait_seconds=0.0, sleep=lambda _: None)  # fmt: skip

    crashed = defaults().begin("t", "key", "h")
    assert isinstance(crashed, Claimed)
    clock.now += timedelta(seconds=29)
    with pytest.raises(Conflict) as early:
        defaults().begin("t", "key", "h")
    assert early.value.code == "idempotency_key_in_progress"
    clock.now += timedelta(seconds=STALE_CLAIM_SECONDS - 29)
    takeover = defaults().begin("t", "key", "h")
    assert isinstance(takeover, Claimed)
    assert takeover.record.request_id == crashed.record.request_id
    assert STALE_CLAIM_SECONDS <= 30
