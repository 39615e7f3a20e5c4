"""Request ids minted by Inferbus carry their creation time (UUID version 7)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from shared.request_ids import is_retired, minted_at, new_request_id

MINTED = datetime(2026, 5, 17, 8, 30, 12, 345_000, tzinfo=UTC)


def test_a_new_id_is_a_version_7_uuid_stamped_with_the_clock() -> None:
    request_id = new_request_id(lambda: MINTED)
    parsed = uuid.UUID(request_id)
    assert (parsed.version, parsed.variant) == (7, uuid.RFC_4122)
    assert minted_at(request_id) == MINTED


def test_ids_minted_at_the_same_millisecond_still_differ() -> None:
    ids = {new_request_id(lambda: MINTED) for _ in range(1000)}
    assert len(ids) == 1000


def test_ids_of_other_kinds_have_no_time() -> None:
    for other in (str(uuid.uuid4()), "order-17", "", "01J-not-a-uuid"):
        assert minted_at(other) is None
        assert not is_retired(other, timedelta(days=1), MINTED + timedelta(days=400))


def test_an_id_is_retired_only_once_older_than_the_retention() -> None:
    request_id = new_request_id(lambda: MINTED)
    retention = timedelta(days=90)
    assert not is_retired(request_id, retention, MINTED + retention)
    assert is_retired(request_id, retention, MINTED + retention + timedelta(seconds=1))
