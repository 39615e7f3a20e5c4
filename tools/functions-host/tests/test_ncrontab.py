"""NCRONTAB parsing and next occurrences (unit tests, no services)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from functions_host.ncrontab import CronSchedule, IntervalSchedule, ScheduleError, parse_schedule


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/5 * * * * *", "2026-01-01T00:00:03", "2026-01-01T00:00:05"),
        ("0 */5 * * * *", "2026-01-01T00:03:00", "2026-01-01T00:05:00"),
        ("0 30 9 * * 1-5", "2026-11-27T10:00:00", "2026-11-30T09:30:00"),  # Fri -> Mon
        ("0 30 9 * * Mon-Fri", "2026-11-27T10:00:00", "2026-11-30T09:30:00"),
        ("0 0 0 1 Jan *", "2026-06-01T00:00:00", "2027-01-01T00:00:00"),
        ("0 0 12 * * Sun", "2026-11-29T12:00:00", "2026-12-06T12:00:00"),
        ("0 0 12 * * 7", "2026-11-28T00:00:00", "2026-11-29T12:00:00"),  # 7 is Sunday too
        ("5,10,15 0 0 * * *", "2026-01-01T00:00:10", "2026-01-01T00:00:15"),
        ("0 0 10-14/2 * * *", "2026-01-01T10:00:00", "2026-01-01T12:00:00"),
        ("0 0 0 29 2 *", "2026-03-01T00:00:00", "2028-02-29T00:00:00"),  # leap day
        ("*/15 * * * *", "2026-01-01T00:01:00", "2026-01-01T00:15:00"),  # five fields
    ],
)
def test_next_occurrence(expression: str, after: str, expected: str) -> None:
    assert parse_schedule(expression).next_after(at(after)) == at(expected)


def test_day_of_month_and_day_of_week_must_both_match() -> None:
    # NCrontab semantics: the 13th only when it is a Friday.
    schedule = CronSchedule.parse("0 0 0 13 * Fri")
    assert schedule.next_after(at("2026-01-01T00:00:00")) == at("2026-02-13T00:00:00")


def test_next_is_strictly_after_a_matching_moment() -> None:
    schedule = CronSchedule.parse("0 * * * * *")
    assert schedule.next_after(at("2026-01-01T00:01:00")) == at("2026-01-01T00:02:00")


def test_timespan_schedule_is_an_interval() -> None:
    schedule = parse_schedule("00:05:00")
    assert isinstance(schedule, IntervalSchedule)
    assert schedule.next_after(at("2026-01-01T00:00:00")) == at("2026-01-01T00:00:00") + timedelta(
        minutes=5
    )


@pytest.mark.parametrize(
    "expression",
    [
        "",
        "* * * *",
        "60 * * * * *",
        "* * 24 * * *",
        "0 0 0 32 * *",
        "* * * * Foo *",
        "*/0 * * * * *",
        "5-1 * * * * *",
        "0 0 0 30 2 *",
    ],
)
def test_invalid_schedules_are_rejected(expression: str) -> None:
    with pytest.raises(ScheduleError):
        parse_schedule(expression).next_after(at("2026-01-01T00:00:00"))
