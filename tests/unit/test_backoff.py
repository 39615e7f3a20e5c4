"""Exponential backoff with full jitter: bounds, growth, cap, Retry-After floor."""

from __future__ import annotations

import random

import pytest

from shared.processing.backoff import retry_delay


def highest(low: float, high: float) -> float:
    return high


def lowest(low: float, high: float) -> float:
    return low


@pytest.mark.parametrize(
    ("retry_count", "ceiling"), [(0, 2), (1, 4), (2, 8), (5, 64), (6, 100), (30, 100)]
)
def test_the_ceiling_doubles_per_retry_up_to_the_cap(retry_count: int, ceiling: float) -> None:
    assert retry_delay(retry_count, base_seconds=2, cap_seconds=100, uniform=highest) == ceiling


def test_full_jitter_can_go_down_to_zero() -> None:
    assert retry_delay(4, base_seconds=2, cap_seconds=100, uniform=lowest) == 0


def test_retry_after_is_a_floor_not_a_ceiling() -> None:
    assert retry_delay(0, base_seconds=2, cap_seconds=100, retry_after=30, uniform=highest) == 30
    assert retry_delay(6, base_seconds=2, cap_seconds=100, retry_after=30, uniform=highest) == 100


def test_real_jitter_stays_within_bounds_and_spreads() -> None:
    rng = random.Random(7)
    delays = [
        retry_delay(3, base_seconds=1, cap_seconds=60, uniform=rng.uniform) for _ in range(500)
    ]
    assert all(0 <= d <= 8 for d in delays)
    assert max(delays) - min(delays) > 6, "full jitter spreads a burst over the whole window"


def test_a_negative_count_is_treated_as_the_first_retry() -> None:
    assert retry_delay(-3, base_seconds=2, cap_seconds=100, uniform=highest) == 2
