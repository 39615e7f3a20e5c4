"""``sb-deadletters replay --extend-deadline DURATION``: a new deadline for replayed requests.

A request past its deadline is refused by the replay, because the processor would only
expire the copy. When the fix took longer than the deadline allowed, the operator may give
the replayed requests a new one: now + DURATION, never beyond ``MaxDeadlineSeconds`` from
now (the longest deadline intake accepts), and never earlier than the deadline a request
already has (an extension does not shorten). Explicit and off by default: a deadline is a
promise to the caller, and only an operator who knows the caller still wants the answer
should move it.

Durations read strictly: ``90m``, ``2h``, ``1d``, ``1d12h`` (the ages of the filters) or
ISO 8601 ``PT2H``, ``P1D``, ``P1DT2H30M`` (days, hours, minutes, seconds; no years or
months, whose length depends on the calendar).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.processing.dead_letters.filters import parse_age

_ISO = re.compile(
    r"P(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?"
)
_EXAMPLES = "e.g. 90m, 2h, 1d, 1d12h, PT2H, P1DT6H"


def parse_duration(text: str) -> timedelta:
    """A positive duration from ``90m``/``2h``/``1d`` or ISO 8601 ``PT2H``; ValueError
    with the accepted forms otherwise."""
    compact = text.strip()
    if compact[:1].upper() == "P":
        found = _ISO.fullmatch(compact.upper())
        if found is None or compact.upper() in ("P", "PT") or compact.upper().endswith("T"):
            raise ValueError(f"not a duration: {text!r} ({_EXAMPLES}; no years or months)")
        parts = {k: float(v) for k, v in found.groupdict().items() if v is not None}
        duration = timedelta(**parts)
    else:
        try:
            duration = parse_age(compact)
        except ValueError:
            raise ValueError(f"not a duration: {text!r} ({_EXAMPLES})") from None
    if duration <= timedelta():
        raise ValueError(f"not a duration: {text!r} (it must be longer than zero)")
    return duration


@dataclass(frozen=True)
class NewDeadline:
    """What an extension made of one request's deadline."""

    old: datetime | None
    new: datetime
    capped: bool  # DURATION went beyond MaxDeadlineSeconds: the cap was used instead
    kept: bool  # the request's own deadline was later than now + DURATION: unchanged

    def describe(self, cap: timedelta) -> str:
        old = self.old.isoformat() if self.old else "none"
        if self.kept:
            return f"deadline {old} kept (later than the extension)"
        told = f"deadline extended from {old} to {self.new.isoformat()}"
        if self.capped:
            told += f" (capped by MaxDeadlineSeconds={int(cap.total_seconds())})"
        return told


@dataclass(frozen=True)
class DeadlineExtension:
    """``--extend-deadline DURATION`` with the app's ``MaxDeadlineSeconds`` as its cap."""

    duration: timedelta
    cap: timedelta

    @property
    def capped(self) -> bool:
        return self.duration > self.cap

    def apply(self, old: datetime | None, now: datetime) -> NewDeadline:
        wanted = now + min(self.duration, self.cap)
        if old is not None and old >= wanted:
            return NewDeadline(old, old, capped=False, kept=True)
        return NewDeadline(old, wanted, capped=self.capped, kept=False)

    def describe(self, new: NewDeadline) -> str:
        return new.describe(self.cap)
