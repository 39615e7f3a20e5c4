"""Choosing and summarising Service Bus dead-lettered messages (``DeadLetteredMessage``).

The operator's filters (``--reason``, ``--tenant``, ``--older-than`` ...) become one
``Selection``; ``find`` resolves the argument of ``show``; ``summarise`` counts what
``list`` prints. They are pure functions of the peeked messages and a clock reading, so
they live apart from the operations that read the broker and write the markers
(``servicebus_dead_letters``) and from the command line that prints them
(``entrypoints.cli.servicebus_dead_letters``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.processing.values import DeadLetteredMessage

AGE_BUCKETS = (
    (timedelta(hours=1), "< 1h"),
    (timedelta(days=1), "1h-1d"),
    (timedelta(days=7), "1d-7d"),
)

# --- choosing -------------------------------------------------------------------------------

_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> timedelta:
    """``90s``, ``30m``, ``2h``, ``7d``, ``1w``, or combined (``1d12h``)."""
    compact = text.strip().lower()
    parts = _AGE.findall(compact)
    if not parts or "".join(n + u for n, u in parts) != compact:
        raise ValueError(f"not an age: {text!r} (e.g. 90s, 30m, 2h, 7d, 1d12h)")
    return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in parts))


@dataclass(frozen=True)
class Selection:
    """Filters that all must hold; an empty selection chooses nothing unless ``everything``."""

    everything: bool = False
    reasons: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    message_ids: tuple[str, ...] = ()
    sequence_numbers: tuple[int, ...] = ()
    older_than: timedelta | None = None
    newer_than: timedelta | None = None

    @property
    def chooses_anything(self) -> bool:
        filters = (self.reasons, self.tenants, self.models, self.message_ids)
        ages = (self.older_than, self.newer_than)
        return self.everything or any(filters) or bool(self.sequence_numbers) or any(ages)

    def matches(self, item: DeadLetteredMessage, now: datetime) -> bool:
        if not self.chooses_anything:
            return False
        lowered = {r.lower() for r in self.reasons}
        age = item.age(now)
        checks = (
            not lowered or item.reason.lower() in lowered,
            not self.tenants or item.tenant in self.tenants,
            not self.models or item.model in self.models,
            not self.message_ids or item.message_id in self.message_ids,
            not self.sequence_numbers or item.sequence_number in self.sequence_numbers,
            self.older_than is None or (age is not None and age > self.older_than),
            self.newer_than is None or (age is not None and age < self.newer_than),
        )
        return all(checks)

    def choose(
        self, items: Iterable[DeadLetteredMessage], now: datetime
    ) -> list[DeadLetteredMessage]:
        return [item for item in items if self.matches(item, now)]


def find(items: Iterable[DeadLetteredMessage], wanted: str) -> list[DeadLetteredMessage]:
    """The messages a ``show`` argument names: a message id, or a sequence number."""
    number = int(wanted) if wanted.isdigit() else None
    return [i for i in items if wanted == i.message_id or i.sequence_number == number]


# --- summaries ------------------------------------------------------------------------------


def age_bucket(age: timedelta | None) -> str:
    if age is None:
        return "unknown"
    return next((label for limit, label in AGE_BUCKETS if age < limit), "> 7d")


@dataclass(frozen=True)
class Summary:
    total: int
    by: dict[str, Counter[str]]
    oldest: datetime | None
    newest: datetime | None


def summarise(items: list[DeadLetteredMessage], now: datetime) -> Summary:
    times = [i.enqueued_time for i in items if i.enqueued_time is not None]
    return Summary(
        total=len(items),
        by={
            "queue": Counter(i.queue for i in items),
            "reason": Counter(i.reason for i in items),
            "age": Counter(age_bucket(i.age(now)) for i in items),
            "tenant": Counter(i.tenant or "?" for i in items),
            "model": Counter(i.model or "?" for i in items),
        },
        oldest=min(times, default=None),
        newest=max(times, default=None),
    )
