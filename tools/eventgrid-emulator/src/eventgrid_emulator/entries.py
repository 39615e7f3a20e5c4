"""One event's copy in one event subscription, with its delivery state.

Each subscription a published event matches gets its own ``Entry``: delivery count,
lock, visibility and expiry are per subscription, as in the service.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any


@dataclass(eq=False)
class Entry:
    event: dict[str, Any]
    published_utc: dt.datetime
    expires_at: float  # monotonic deadline of the subscription's event time to live
    delivery_count: int = 0
    visible_at: float = 0.0  # a delayed release hides the event until then
    lock_token: str | None = None
    locked_until: float = 0.0
    lock_created: float = 0.0  # the renew-lock window counts from the receive
    last_attempt_utc: dt.datetime | None = None

    def expired(self, now: float) -> bool:
        return now >= self.expires_at
