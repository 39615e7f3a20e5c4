"""Request ids that remember when they were minted (UUID version 7, RFC 9562).

Jobs are retired by Blob lifecycle rules, which leave no trace. A caller polling an old
request then deserves ``410 Gone`` ("it existed, it has been retired"), not ``404 Not
Found`` ("no such request"). A version 7 UUID carries its creation time in its first 48
bits (Unix milliseconds), so the status API can tell the two apart with no extra storage
operation: an id minted before the retention period whose job is missing was retired.
The random bits that follow keep ids unguessable, as with version 4.

Ids chosen by others (direct Service Bus producers) carry no time: for them a missing job
is always ``404``.
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta

from shared.clock import Clock, utc_now

_VERSION_7 = 7


def new_request_id(clock: Clock = utc_now) -> str:
    """A fresh version 7 UUID stamped with ``clock()`` (74 random bits)."""
    millis = int(clock().timestamp() * 1000) & ((1 << 48) - 1)
    random_bits = int.from_bytes(os.urandom(10), "big")
    rand_a = random_bits >> 68  # 12 bits
    rand_b = random_bits & ((1 << 62) - 1)  # 62 bits
    value = (millis << 80) | (_VERSION_7 << 76) | (rand_a << 64) | (0b10 << 62) | rand_b
    return str(uuid.UUID(int=value))


def minted_at(request_id: str) -> datetime | None:
    """When a version 7 request id was minted; None for any other kind of id."""
    try:
        parsed = uuid.UUID(request_id)
    except ValueError:
        return None
    if parsed.version != _VERSION_7 or parsed.variant != uuid.RFC_4122:
        return None
    return datetime.fromtimestamp((parsed.int >> 80) / 1000, UTC)


def is_retired(request_id: str, retention: timedelta, now: datetime) -> bool:
    """Whether a request id was minted longer ago than ``retention`` (its records expired)."""
    minted = minted_at(request_id)
    return minted is not None and now - minted > retention
