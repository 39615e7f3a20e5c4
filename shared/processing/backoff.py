"""Exponential backoff with full jitter for scheduled retries.

Full jitter (a uniform draw between zero and the exponential ceiling) spreads the retries
of a burst that failed together, so they do not hit a recovering model at the same
instant. A ``Retry-After`` from the dependency is a floor: retrying earlier only earns
another 429.
"""

from __future__ import annotations

import random
from collections.abc import Callable


def retry_delay(
    retry_count: int,
    *,
    base_seconds: float,
    cap_seconds: float,
    retry_after: float | None = None,
    uniform: Callable[[float, float], float] = random.uniform,
) -> float:
    """Seconds to wait before attempt ``retry_count + 1`` (``retry_count`` starts at 0)."""
    ceiling = min(cap_seconds, base_seconds * (2 ** max(0, retry_count)))
    delay = uniform(0.0, ceiling)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay
