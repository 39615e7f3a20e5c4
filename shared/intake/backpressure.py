"""Backpressure the caller can see: refuse new work while its lane's queue is too deep.

Accepting work that will sit for hours past its deadline helps nobody; a 503 with
Retry-After lets well-behaved clients slow down. The queue depth comes from the broker's
runtime counts, cached for a few seconds so a burst of submissions costs one lookup (and
what this instance sent since the reading counted on top, so the cache does not hide the
burst it saves lookups for; the expected wait below also counts what the reading counted
as going on to the model since, or every estimate would be as old as the reading). If
the count cannot be read, intake stays open (the broker, not the probe, is the source of
truth for whether a send succeeds), and the failure is cached like a reading, so an
unreachable management endpoint costs one attempt per cache period, not one per request.

Each lane (``shared.lanes``) is gated on its own queue and limit (``LaneBacklogGates``):
a deep standard queue does not refuse high-priority or ordered work, whose queues have
their own triggers and drain on their own. Global Batch work travels the queue of its
priority before it is staged, so it is gated there too.

A fixed depth is only a ceiling: what a caller cares about is whether its request will be
answered before its deadline. So each request is also admitted by its **expected wait**
(``WaitAdmission``): the messages ahead of it (its own lane's queue, and the lanes that go
first or alongside at the model's gate: high priority before everything, the standard and
ordered lanes together; active and scheduled messages both, since a message given back
for want of capacity waits as a scheduled copy and comes back first by its deadline),
times what one request of its model costs in tokens, over its deployment's tokens per
minute; for a lane other than the priority lane, over what high priority leaves of them
(its part of the tokens the deployment served lately, ``Pace.high_share``): high-priority
requests that arrive while a request waits go before it, so with high priority taking a
quarter of the quota a normal request's wait is four thirds of its backlog's. A request
is refused before anything is stored unless that wait fits in
``ADMITTED_SHARE`` of its deadline: the rest is for what the estimate does not see (the
call itself, a share that moves between instances, counts up to ``BacklogCacheSeconds``
old), since a request accepted and then expired is worse for its caller than one refused
at once. The refusal's ``Retry-After`` is the expected wait: the time the backlog it would
have joined takes to clear. A model without a token quota, or a lane whose depth cannot
be read, is admitted on depth alone.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Final

from shared.errors import ServiceUnavailable
from shared.intake.ports import BacklogProbe, ModelPace, QueueDepth
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
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self._monotonic = monotonic
        self._lane = lane
        self._limit = limit
        self._cache_seconds = cache_seconds
        self._retry_after = retry_after
        self._lock = threading.Lock()
        self._cached: tuple[float, QueueDepth | None] | None = None
        self._sent = 0  # messages this instance sent since the cached reading

    def sent(self) -> None:
        """A message went to the queue: counted until the next reading sees it."""
        with self._lock:
            self._sent += 1

    def check(self) -> None:
        """Raise ServiceUnavailable when the backlog is over the limit (0 disables)."""
        if self._probe is None or self._limit <= 0:
            return
        depth = self._depth()
        if depth is not None and depth.active >= self._limit:
            raise ServiceUnavailable(
                f"the {self._lane} lane's request backlog is {depth.active} messages "
                f"(limit {self._limit}); retry later",
                retry_after=self._retry_after,
            )

    def depth(self) -> QueueDepth | None:
        """The queue's counts (cached), or None when they cannot be read."""
        if self._probe is None:
            return None
        return self._depth()

    def _depth(self) -> QueueDepth | None:
        now = self._monotonic()
        with self._lock:
            if self._cached and now - self._cached[0] < self._cache_seconds:
                read_at, read = self._cached
                if read is None:
                    return None
                return replace(read, active=read.active + self._sent,
                               age_seconds=now - read_at, sent_since=self._sent)  # fmt: skip
        assert self._probe is not None
        depth: QueueDepth | None
        try:
            depth = self._probe.queue_depth()
        except Exception as error:
            log.warning(
                "could not read the %s lane's request backlog (%s); accepting work",
                self._lane,
                error,
            )
            depth = None
        with self._lock:
            self._cached = (now, depth)
            self._sent = 0
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
        monotonic: Callable[[], float] = time.monotonic,
    ) -> LaneBacklogGates:
        """A gate per lane that has both a probe and a limit above zero."""
        return cls(
            {
                lane: BacklogGate(
                    probe,
                    limits.get(lane, 0),
                    cache_seconds,
                    retry_after,
                    lane=lane.value,
                    monotonic=monotonic,
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

    def sent(self, lane: Lane) -> None:
        """A request's message went to ``lane``'s queue (``BacklogGate.sent``)."""
        gate = self._gates.get(lane)
        if gate is not None:
            gate.sent()

    def depth(self, lane: Lane) -> QueueDepth | None:
        """``lane``'s queue counts (cached), None when it is not gated or unreadable."""
        gate = self._gates.get(lane)
        return gate.depth() if gate is not None else None


# How much of its deadline a request's expected wait may take (the module doc).
ADMITTED_SHARE: Final = 2 / 3
# The most of a deployment high priority is counted to take before other lanes' requests
# (a run of high-priority work alone must not make every other request's wait endless).
MOST_OVERTAKEN: Final = 0.9
# The lanes whose messages a request of each lane waits behind at the model's gate.
AHEAD: Final = {
    Lane.PRIORITY: (Lane.PRIORITY,),
    Lane.STANDARD: (Lane.PRIORITY, Lane.STANDARD, Lane.ORDERED),
    Lane.ORDERED: (Lane.PRIORITY, Lane.STANDARD, Lane.ORDERED),
}


class WaitAdmission:
    """Refuse a request whose deadline comes before its expected wait (module doc)."""

    def __init__(self, backlog: LaneBacklogGates, pace: ModelPace | None) -> None:
        self._backlog = backlog
        self._pace = pace

    def expected_wait(
        self,
        lane: Lane,
        model: str,
        text_chars: int | None = None,
        parameters: Mapping[str, Any] | None = None,
    ) -> float | None:
        """Seconds until a request of ``model`` sent now on ``lane`` would reach its model
        (None: not known, for want of a token quota or of any depth); the request's text
        length and parameters tell what a call costs until its model has answered."""
        if self._pace is None:
            return None
        pace = self._pace.pace(model, text_chars, parameters)
        if pace is None:
            return None
        depths = [
            depth for ahead in AHEAD[lane] if (depth := self._backlog.depth(ahead)) is not None
        ]
        if not depths or pace.tokens_per_minute <= 0:
            return None
        overtaken = 0.0 if lane is Lane.PRIORITY else min(pace.high_share, MOST_OVERTAKEN)
        per_request = pace.cost * 60 / (pace.tokens_per_minute * (1 - overtaken))
        # The broker's counts may be a cached reading's: what they counted has gone on to
        # the model since, a request every ``per_request`` seconds; what this instance sent
        # since the reading waits behind all of it.
        counted = sum(depth.ahead - depth.sent_since for depth in depths)
        gone = min(counted, min(depth.age_seconds for depth in depths) / per_request)
        sent_since = sum(depth.sent_since for depth in depths)
        return (counted - gone + sent_since + 1) * per_request

    def check(
        self,
        lane: Lane,
        model: str,
        deadline_seconds: int | None,
        text_chars: int | None = None,
        parameters: Mapping[str, Any] | None = None,
    ) -> None:
        """Raise ServiceUnavailable, Retry-After the expected wait, when the request's
        deadline comes first."""
        if deadline_seconds is None:
            return
        wait = self.expected_wait(lane, model, text_chars, parameters)
        if wait is not None and wait > ADMITTED_SHARE * deadline_seconds:
            raise ServiceUnavailable(
                f"the {lane} lane's backlog takes about {wait:.0f} s to reach model "
                f"'{model}', too close to this request's deadline ({deadline_seconds} s); "
                "nothing was accepted, retry later or with a later deadline",
                retry_after=math.ceil(wait),
            )
