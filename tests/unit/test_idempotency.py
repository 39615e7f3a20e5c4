"""Idempotency-Key claims, replays, conflicts and stale-marker takeover."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.adapters.in_memory import InMemoryDocuments
from shared.errors import ConcurrencyConflict, Conflict, InvalidInput
from shared.intake.idempotency import (
    Claimed,
    DocumentIdempotencyStore,
    IdempotencyGuard,
    Replay,
    hash_key,
)


def new_store() -> DocumentIdempotencyStore:
    """Markers as documents in a fresh in-memory account."""
    return DocumentIdempotencyStore(InMemoryDocuments(), "idempotency")


class ManualClock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def guard(store: DocumentIdempotencyStore, clock: ManualClock) -> IdempotencyGuard:
    return IdempotencyGuard(
        store, clock, wait_seconds=0.2, stale_after_seconds=60, sleep=lambda _: None
    )


def test_first_claim_wins_and_commit_makes_later_ones_replay() -> None:
    store, clock = new_store(), ManualClock()
    first = guard(store, clock).begin("t", "key", "hash-a")
    assert isinstance(first, Claimed)
    guard(store, clock).commit(first)

    again = guard(store, clock).begin("t", "key", "hash-a")
    assert again == Replay(first.record.request_id)


def test_a_different_body_with_the_same_key_conflicts() -> None:
    store, clock = new_store(), ManualClock()
    claim = guard(store, clock).begin("t", "key", "hash-a")
    assert isinstance(claim, Claimed)
    with pytest.raises(Conflict) as conflict:
        guard(store, clock).begin("t", "key", "hash-b")
    assert conflict.value.code == "idempotency_key_reused"


def test_a_pending_claim_makes_others_wait_then_409_with_retry_after() -> None:
    store, clock = new_store(), ManualClock()
    assert isinstance(guard(store, clock).begin("t", "key", "h"), Claimed)
    with pytest.raises(Conflict) as conflict:
        guard(store, clock).begin("t", "key", "h")
    assert conflict.value.code == "idempotency_key_in_progress"
    assert conflict.value.retry_after == 1


def test_release_frees_the_key_for_a_new_request() -> None:
    store, clock = new_store(), ManualClock()
    first = guard(store, clock).begin("t", "key", "h")
    assert isinstance(first, Claimed)
    guard(store, clock).release(first)
    second = guard(store, clock).begin("t", "key", "h")
    assert isinstance(second, Claimed)
    assert second.record.request_id != first.record.request_id


def test_a_stale_pending_claim_is_taken_over_with_the_same_request_id() -> None:
    store, clock = new_store(), ManualClock()
    crashed = guard(store, clock).begin("t", "key", "h")
    assert isinstance(crashed, Claimed)
    clock.now += timedelta(seconds=61)
    takeover = guard(store, clock).begin("t", "key", "h")
    assert isinstance(takeover, Claimed)
    assert takeover.record.request_id == crashed.record.request_id
    with pytest.raises(ConcurrencyConflict):
        guard(store, clock).commit(crashed)


@pytest.mark.parametrize("key", ["", "with space", "é", "x" * 256])
def test_malformed_keys_are_invalid_input(key: str) -> None:
    with pytest.raises(InvalidInput):
        hash_key(key)


def test_keys_hash_to_fixed_length_names() -> None:
    assert len(hash_key("a")) == len(hash_key("b" * 255)) == 64
