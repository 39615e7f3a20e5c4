"""Backpressure the caller can see: refuse new work while its lane's queue is too deep.

Accepting work that will sit for hours past its deadline helps nobody; a 503 with
Retry-After lets well-behaved clients slow down. The queue depth comes from the broker's
runtime counts, cached for a few seconds so a burst of submissions costs one lookup. If
the count cannot be read, intake stays open (the broker, not the probe, is the source of
truth for whether a send succeeds), and the failure is cached like a reading, so an
unreachable management endpoint costs one attempt per cache period, not one per request.

Each lane (``shared.lanes``) is gated on its own queue and limit (``LaneBacklogGates``):
a deep standard queue does not refuse high-priority or ordered work, whose queues have
their own triggers and drain on their own. Global Batch work travels the queue of its
priority before it is staged, so it is gated there too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from shared.errors import ServiceUnavailable
from shared.intake.ports import BacklogProbe
from shared.lanes import Lane
from shared.settings import Settings

log = logging.getLogger(__name__)


class BacklogGate:
    """One queue's gate: its depth (cached) against its limit."""

    def __init__(
        self,
        probe: BacklogProbe | None,
        limit: int,
        cache_seconds: float,
        retry_after: int,
        *,
        lane: str = "standard",
    ) -> None:
        self._probe = probe
        self._lane = lane
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
                f"the {self._lane} lane's request backlog is {depth} messages "
                f"(limit {self._limit}); retry later",
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
            log.warning(
                "could not read the %s lane's request backlog (%s); accepting work",
                self._lane,
                error,
            )
            depth = None
        with self._lock:
            self._cached = (now, depth)
        return depth


def lane_backlog_limits(settings: Settings) -> dict[Lane, int]:
    """Each lane's backlog limit (0: not gated): MaxQueueBacklog, MaxPriorityQueueBacklog,
    MaxOrderedQueueBacklog."""
    return {
        Lane.STANDARD: settings.backpressure.max_queue_backlog,
        Lane.PRIORITY: settings.backpressure.max_priority_queue_backlog,
        Lane.ORDERED: settings.backpressure.max_ordered_queue_backlog,
    }


class LaneBacklogGates:
    """The gates of every lane; a lane without one (no probe, or limit 0) is not gated."""

    def __init__(self, gates: dict[Lane, BacklogGate]) -> None:
        self._gates = dict(gates)

    @classmethod
    def open(cls) -> LaneBacklogGates:
        """No backpressure on any lane."""
        return cls({})

    @classmethod
    def of(
        cls,
        probes: Mapping[Lane, BacklogProbe | None],
        limits: dict[Lane, int],
        *,
        cache_seconds: float,
        retry_after: int,
    ) -> LaneBacklogGates:
        """A gate per lane that has both a probe and a limit above zero."""
        return cls(
            {
                lane: BacklogGate(
                    probe, limits.get(lane, 0), cache_seconds, retry_after, lane=lane.value
                )
                for lane, probe in probes.items()
                if probe is not None and limits.get(lane, 0) > 0
            }
        )

    @classmethod
    def from_settings(
        cls, settings: Settings, probes: Mapping[Lane, BacklogProbe | None]
    ) -> LaneBacklogGates:
        """The gates of the lanes' limits in ``settings`` over ``probes``; a refusal asks
        the caller to wait as long as a status poll (at least 5 s)."""
        return cls.of(
            probes,
            lane_backlog_limits(settings),
            cache_seconds=settings.backpressure.cache_seconds,
            retry_after=max(5, settings.limits.status_poll_seconds),
        )

    def check(self, lane: Lane) -> None:
        """Raise ServiceUnavailable when ``lane``'s queue holds its limit or more."""
        gate = self._gates.get(lane)
        if gate is not None:
            gate.check()
