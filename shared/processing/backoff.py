"""Exponential backoff with full jitter for scheduled retries.

Full jitter (a uniform draw between zero and the exponential ceiling) spreads the retries
of a burst that failed together, so they do not hit a recovering model at the same
instant. A ``Retry-After`` from the dependency is a floor: retrying earlier only earns
another 429.

``floor_fraction`` (app setting ``RetryJitterFloor``) keeps each draw above that share of
its ceiling, so the sum of the ceilings times the fraction is a guaranteed minimum of the
whole retry budget: with the defaults (``MaxRetries`` 9, ``RetryBaseSeconds`` 5,
``RetryMaxSeconds`` 600, ``RetryJitterFloor`` 0.5) the ceilings are 5, 10, 20, 40, 80,
160, 320, 600 and 600 s (1,835 s), so a request gives up no sooner than 917 s (about
15 minutes) after its first transient failure: a ten-minute storage or broker outage
does not dead-letter healthy work. A fraction of 0 is plain full jitter.
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
    floor_fraction: float = 0.0,
) -> float:
    """Seconds to wait before attempt ``retry_count + 1`` (``retry_count`` starts at 0)."""
    ceiling = min(cap_seconds, base_seconds * (2 ** max(0, retry_count)))
    delay = uniform(ceiling * min(max(floor_fraction, 0.0), 1.0), ceiling)
    if retry_after is not None:
        delay = max(delay, retry_after)
    return delay
