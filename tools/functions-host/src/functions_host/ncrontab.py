"""NCRONTAB schedules of timer triggers: ``{second} {minute} {hour} {day} {month} {day-of-week}``.

Fields take ``*``, values, ranges ``a-b``, steps ``*/n`` and ``a-b/n``, lists ``a,b`` and
names (``Jan``-``Dec``, ``Sun``-``Sat``; Sunday is 0, 7 is accepted as Sunday too). A
five-field expression is taken as having second 0. As in NCrontab, a time matches only
when the day of month AND the day of week both match (classic cron ORs them when both are
restricted). A TimeSpan schedule (``hh:mm:ss``) means "every interval" as on App Service
plans. Times are UTC unless the caller passes local times.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from functions_host.config import HostConfigError, parse_timespan

_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_FIELDS = (
    ("second", 0, 59, None),
    ("minute", 0, 59, None),
    ("hour", 0, 23, None),
    ("day", 1, 31, None),
    ("month", 1, 12, _MONTHS),
    ("day-of-week", 0, 7, _DAYS),
)
_SEARCH_LIMIT_DAYS = 366 * 5


class ScheduleError(HostConfigError):
    """A schedule expression that cannot be parsed."""


def _value(text: str, low: int, names: list[str] | None, offset: int) -> int:
    lowered = text.strip().lower()
    if names and lowered[:3] in names and not lowered.isdigit():
        return names.index(lowered[:3]) + offset
    if not lowered.isdigit():
        raise ScheduleError(f"not a number or name: {text!r}")
    return int(lowered)


def parse_field(
    text: str, name: str, low: int, high: int, names: list[str] | None
) -> frozenset[int]:
    offset = 1 if name == "month" else 0
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise ScheduleError(f"empty list item in {name} field {text!r}")
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if step_text and (not step_text.isdigit() or step < 1):
            raise ScheduleError(f"bad step in {name} field: {part!r}")
        if base == "*":
            start, end = low, high if name != "day-of-week" else 6
        elif "-" in base:
            first, last = base.split("-", 1)
            start, end = _value(first, low, names, offset), _value(last, low, names, offset)
        else:
            start = _value(base, low, names, offset)
            end = high if step_text else start
        if not (low <= start <= high and low <= end <= high) or start > end:
            raise ScheduleError(f"{name} field out of range {low}-{high}: {part!r}")
        values.update(range(start, end + 1, step))
    if name == "day-of-week" and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


@dataclass(frozen=True)
class CronSchedule:
    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]

    @classmethod
    def parse(cls, expression: str) -> CronSchedule:
        fields = expression.split()
        if len(fields) == 5:
            fields = ["0", *fields]
        if len(fields) != 6:
            raise ScheduleError(
                f"NCRONTAB needs 6 fields (sec min hour day month day-of-week): {expression!r}"
            )
        parsed = [parse_field(text, *spec) for text, spec in zip(fields, _FIELDS, strict=True)]
        return cls(*parsed)

    def _day_matches(self, moment: datetime) -> bool:
        weekday = (moment.weekday() + 1) % 7  # Python: Monday=0; NCRONTAB: Sunday=0
        return moment.day in self.days and weekday in self.weekdays

    def next_after(self, moment: datetime) -> datetime:
        """The first matching time strictly after ``moment`` (whole seconds)."""
        candidate = moment.replace(microsecond=0) + timedelta(seconds=1)
        limit = moment + timedelta(days=_SEARCH_LIMIT_DAYS)
        while candidate <= limit:
            if candidate.month not in self.months:
                year, month = divmod(candidate.month, 12)
                candidate = candidate.replace(
                    year=candidate.year + year, month=month + 1, day=1, hour=0, minute=0, second=0
                )
                continue
            if not self._day_matches(candidate):
                candidate = (candidate + timedelta(days=1)).replace(hour=0, minute=0, second=0)
                continue
            if candidate.hour not in self.hours:
                candidate = (candidate + timedelta(hours=1)).replace(minute=0, second=0)
                continue
            if candidate.minute not in self.minutes:
                candidate = (candidate + timedelta(minutes=1)).replace(second=0)
                continue
            if candidate.second not in self.seconds:
                candidate += timedelta(seconds=1)
                continue
            return candidate
        raise ScheduleError("schedule never fires within five years")


@dataclass(frozen=True)
class IntervalSchedule:
    interval: timedelta

    def next_after(self, moment: datetime) -> datetime:
        return moment + self.interval


def parse_schedule(expression: str) -> CronSchedule | IntervalSchedule:
    """An NCRONTAB expression, or a TimeSpan interval such as ``00:05:00``."""
    text = expression.strip()
    if " " not in text and ":" in text:
        seconds = parse_timespan(text)
        if seconds <= 0:
            raise ScheduleError(f"interval must be positive: {expression!r}")
        return IntervalSchedule(timedelta(seconds=seconds))
    return CronSchedule.parse(text)
