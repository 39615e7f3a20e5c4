"""Backpressure the caller can see: refuse new work while the queue is too deep.

Accepting work that will sit for hours past its deadline helps nobody; a 503 with
Retry-After lets well-behaved clients slow down. The queue depth comes from the broker's
runtime counts, cached for a few seconds so a burst of submissions costs one lookup. If
the count cannot be read, intake stays open (the broker, not the probe, is the source of
truth for whether a send succeeds), and the failure is cached like a reading, so an
unreachable management endpoint costs one attempt per cache period, not one per request.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from shared.errors import ServiceUnavailable

log = logging.getLogger(__name__)


class BacklogProbe(Protocol):
    def active_messages(self) -> int:
        """Active (deliverable) messages in the requests queue."""
        ...


class BacklogGate:
    def __init__(
        self, probe: BacklogProbe | None, limit: int, cache_seconds: float, retry_after: int
    ) -> None:
        self._probe = probe
        self._limit = limit
        self._cache_seconds = cache_seconds
        self._retry_after = retry_after
        self._lock = threading.Lock()
        self._cached: tuple[float, int | None] | None = None

    def check(self) -> None:
        """Raise ServiceUnavailable when the backlog is over the limit (0 disables)."""
        if self._probe is None or self._limit <= 0:
            return
        depth = self._depth()
        if depth is not None and depth >= self._limit:
            raise ServiceUnavailable(
                f"the request backlog is {depth} messages (limit {self._limit}); retry later",
                retry_after=self._retry_after,
            )

    def _depth(self) -> int | None:
        now = time.monotonic()
        with self._lock:
            if self._cached and now - self._cached[0] < self._cache_seconds:
                return self._cached[1]
        assert self._probe is not None
        depth: int | None
        try:
            depth = self._probe.active_messages()
        except Exception as error:
            log.warning("could not read the request backlog (%s); accepting work", error)
            depth = None
        with self._lock:
            self._cached = (now, depth)
        return depth
