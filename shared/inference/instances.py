"""The instances of the app, and each one's share of a deployment's quota by its demand.

A model deployment's quota is shared by every instance the platform runs (Flex scales the
app out to ``maximumInstanceCount``, at least 40), and no always-on service coordinates
them. Equal shares waste the quota: an instance without messages holds its part while one
with a backlog waits, and at 40 instances no share fits even one call. So the budget
follows demand:

- each instance writes a heartbeat into the app's own storage (``instances/<id>.json`` in
  the ledger container) with, in its metadata, the tokens its calls of each deployment
  wait for or hold and the tokens it served lately (``capacity.Demand``), every
  ``heartbeat_seconds``, and sooner (at most once a ``refresh_seconds``) when its demand
  of a deployment starts, stops or moves by more than ``MOVED_BY``;
- it reads every heartbeat in one listing (names, times and metadata: no document is
  read), every ``refresh_seconds`` while it has work and every ``heartbeat_seconds``
  otherwise. An instance is live when its heartbeat is within three
  ``heartbeat_seconds`` of the newest (the storage's clock for all of them, so the
  instances' clocks need not agree): a crashed one drops out three heartbeats later;
- its share of a deployment (``demand_share``) is its weighted demand over everyone's;
  an instance without demand keeps a floor (``IDLE_FLOOR`` of the quota shared by the
  idle ones) so a first call can start, and nobody having work means equal shares. An
  instance whose demand has just started (after ``RAMP_SECONDS`` or more without) takes at
  most an equal share until it has read the others after they could have answered
  (``RAMP_SECONDS``): a burst that reaches every instance at once must not give each of
  them the whole quota. The demand an instance publishes is the most it had since its
  last heartbeat, so the moment between two batches does not read as idle.

Shares are computed from one listing, so they add up to about one; the instances' views
differ by at most a refresh, and the 429s of that moment pause the gate without spending
an attempt. Until the first listing, an instance counts itself alone.

The registry keeps its count and shares in a thread of its own, started with the app's
services, so a model call never waits for storage; a storage failure keeps the last view
(and says so once). A gate among other instances starts with an empty window
(``capacity.DeploymentGate``): a burst that wakes every instance at once cannot spend a
window in each before they have seen one another.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import astuple, dataclass, field, fields
from datetime import datetime
from typing import Final

from shared.clock import Clock, MonotonicClock, utc_now
from shared.documents import DescribedDocuments
from shared.inference.capacity import Demand

log = logging.getLogger(__name__)

PREFIX: Final = "instances/"
# The heartbeat's metadata: "<gate id>:<weighted>:<tokens>:<high>:<served>;..."
DEMAND_KEY: Final = "demand"
IDLE_FLOOR: Final = 0.05  # the part of a quota the idle instances keep, together
RAMP_SECONDS: Final = 2.0
MOVED_BY: Final = 0.1  # a demand that moved by more than this part is written at once


@dataclass(frozen=True)
class Heartbeat:
    """One live instance as its heartbeat says: its demand of each deployment (by gate id)."""

    instance: str
    demands: Mapping[str, Demand] = field(default_factory=dict)


def gate_id(gate: str) -> str:
    """A deployment's gate key as metadata can carry it (letters and digits only)."""
    return hashlib.sha256(gate.encode()).hexdigest()[:12]


def encode_demands(demands: Mapping[str, Demand]) -> str:
    return ";".join(
        ":".join([gate, *(f"{part:.0f}" for part in astuple(demand))])
        for gate, demand in sorted(demands.items())
        if any(round(part) for part in astuple(demand))
    )


def decode_demands(text: str) -> dict[str, Demand]:
    """What ``encode_demands`` wrote; a part that does not read is skipped (a heartbeat of
    another version counts as no demand rather than stopping the count), and one of an
    older version (demand only) served nothing."""
    demands: dict[str, Demand] = {}
    for part in filter(None, text.split(";")):
        gate, _, numbers = part.partition(":")
        try:
            values = [float(number) for number in numbers.split(":")]
        except ValueError:
            continue
        if len(values) in (2, len(fields(Demand))):
            demands[gate] = Demand(*values)
    return demands


def demand_share(own: float, others: list[float], *, ramping: bool = False) -> float:
    """This instance's part of a deployment's quota, given its weighted demand and the
    live others' (see the module doc)."""
    live = len(others) + 1
    equal = 1.0 / live
    total = own + sum(others)
    if total <= 0:
        return equal
    idle = sum(1 for demand in others if demand <= 0) + (1 if own <= 0 else 0)
    floor = IDLE_FLOOR / live
    if own <= 0:
        return floor
    share = (1.0 - floor * idle) * own / total
    return min(share, equal) if ramping else share


class InstanceRegistry:
    """Implements ``capacity.Fleet`` from the instances' heartbeats (see the module doc)."""

    def __init__(
        self,
        documents: DescribedDocuments,
        container: str,
        instance_id: str,
        *,
        heartbeat_seconds: float = 5.0,
        refresh_seconds: float = 1.0,
        clock: Clock = utc_now,
        monotonic: MonotonicClock = time.monotonic,
    ) -> None:
        self._documents = documents
        self._container = container
        self.instance_id = instance_id
        self._heartbeat = heartbeat_seconds
        self._refresh = min(refresh_seconds, heartbeat_seconds)
        self._clock = clock
        self._monotonic = monotonic
        self._sources: dict[str, Callable[[], Demand]] = {}
        self._others: list[Heartbeat] = []
        self._own: dict[str, Demand] = {}
        self._demand_since: dict[str, float] = {}
        self._idle_since: dict[str, float] = {}
        self._logged: dict[str, float] = {}
        self._read_at = float("-inf")
        self._written: tuple[float, dict[str, Demand]] | None = None  # when, what
        self._started = False
        self._lock = threading.Lock()
        self._nudged = threading.Event()
        self._failing = False

    def watch(self, gate: str, demand: Callable[[], Demand]) -> None:
        """Publish ``demand`` (a gate's ``DeploymentGate.demand``) under ``gate``'s key."""
        with self._lock:
            self._sources[gate_id(gate)] = demand

    def share(self, gate: str) -> float:
        """Implements ``capacity.Fleet.share``."""
        return self.share_of(gate_id(gate))

    def share_of(self, key: str) -> float:
        """The share of the gate whose id (``gate_id``) is ``key``."""
        with self._lock:
            own = self._own.get(key, Demand()).weighted
            since = self._demand_since.get(key)
            others = [beat.demands.get(key, Demand()).weighted for beat in self._others]
            ramping = since is not None and self._read_at - since < RAMP_SECONDS
        return demand_share(own, others, ramping=ramping)

    def tokens_elsewhere(self, gate: str) -> float:
        """Implements ``capacity.Fleet.tokens_elsewhere``."""
        key = gate_id(gate)
        with self._lock:
            return sum(beat.demands.get(key, Demand()).tokens for beat in self._others)

    def served_elsewhere(self, gate: str) -> tuple[float, float]:
        """Implements ``capacity.Fleet.served_elsewhere``."""
        key = gate_id(gate)
        with self._lock:
            served = [beat.demands.get(key, Demand()) for beat in self._others]
        return sum(demand.high for demand in served), sum(demand.served for demand in served)

    def demand_changed(self) -> None:
        """Implements ``capacity.Fleet.demand_changed``: beat now (never blocks)."""
        self._nudged.set()

    def start(self) -> None:
        """Beat from now on, in a thread of its own (the app starts it with its services,
        so the others know this instance before its first call); idempotent."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._run, name="instances", daemon=True).start()

    def _sample(self) -> dict[str, Demand]:
        with self._lock:
            sources = dict(self._sources)
        return {key: demand() for key, demand in sources.items()}

    def beat(self) -> int:
        """Write this instance's heartbeat when due (its period passed, or its demand
        started, stopped or moved) and read everyone's; the live count (one listing, and
        at most one write)."""
        now = self._monotonic()
        own = self._sample()
        written = self._written
        if written is None or now - written[0] >= self._heartbeat or _moved(written[1], own):
            name = f"{PREFIX}{self.instance_id}.json"
            encoded = encode_demands(own)
            self._documents.put_described(
                self._container,
                name,
                {"instance": self.instance_id, "at": self._clock().isoformat()},
                {DEMAND_KEY: encoded} if encoded else {},  # Blob storage drops empty values
            )
            self._written = (now, own)
        listed = self._documents.list_described(self._container, PREFIX)
        newest = max((entry.modified for entry in listed), default=None)
        others = [
            Heartbeat(entry.name[len(PREFIX) : -len(".json")],
                      decode_demands(entry.metadata.get(DEMAND_KEY, "")))
            for entry in listed
            if newest is not None
            and fresh(entry.modified, newest, 3 * self._heartbeat)
            and entry.name != f"{PREFIX}{self.instance_id}.json"
        ]  # fmt: skip
        with self._lock:
            for key, demand in own.items():
                if demand.weighted <= 0:
                    self._idle_since.setdefault(key, now)
                    continue
                idle = self._idle_since.pop(key, None)
                if key not in self._demand_since or (
                    idle is not None and now - idle >= RAMP_SECONDS
                ):
                    self._demand_since[key] = now  # new work after a real pause: ramp
            self._own = own
            self._others = others
            self._read_at = now
        self._log_shares()
        return len(others) + 1

    def _log_shares(self) -> None:
        """Say when a deployment's share moved by a tenth or more (operators see the
        budget flow between instances, not every second's wobble)."""
        for key in list(self._sources):
            share = self.share_of(key)
            before = self._logged.get(key)
            if before is None or abs(share - before) >= 0.1:
                busy = sum(1 for beat in self._others if beat.demands.get(key, Demand()).weighted)
                log.info(
                    "quota share of gate %s: %.2f (was %s); %d of %d other instances have work",
                    key, share, "none" if before is None else f"{before:.2f}", busy,
                    len(self._others),
                )  # fmt: skip
                self._logged[key] = share

    def _run(self) -> None:
        counted = 1
        while True:  # a daemon thread: it ends with the process
            began = self._monotonic()
            try:
                live = self.beat()
            except Exception as error:
                if not self._failing:
                    log.warning("instance heartbeat failed (%s); keeping the shares", error)
                self._failing = True
            else:
                self._failing = False
                if live != counted:
                    log.info("live instances: %d (was %d)", live, counted)
                    counted = live
            busy = any(demand.weighted > 0 for demand in self._own.values())
            period = self._refresh if busy else self._heartbeat
            # A nudge shortens the wait, but beats stay at least ``refresh_seconds`` apart.
            time.sleep(max(0.0, self._refresh - (self._monotonic() - began)))
            self._nudged.wait(max(0.0, period - self._refresh))
            self._nudged.clear()


def _moved(published: Mapping[str, Demand], current: Mapping[str, Demand]) -> bool:
    """Whether a deployment's demand appeared, went, or moved by more than
    ``MOVED_BY`` since the heartbeat written last: the others' shares are computed from
    it, so a stale demand would hand out the quota by yesterday's needs."""
    published = {key: demand for key, demand in published.items() if demand.weighted > 0}
    current = {key: demand for key, demand in current.items() if demand.weighted > 0}
    if set(published) != set(current):
        return True
    return any(
        abs(current[key].weighted - demand.weighted) > MOVED_BY * demand.weighted
        for key, demand in published.items()
    )


def fresh(at: datetime, newest: datetime, within: float) -> bool:
    return (newest - at).total_seconds() <= within
