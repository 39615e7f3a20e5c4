"""Model capacity: calls to a deployment within its tokens and requests per minute.

A model deployment's quota is the limit the broker exists to protect: twenty workers that
each get a 429 are worse than five that do not. Each deployment of the catalog that
declares a ``capacity`` gets a ``DeploymentGate`` per instance, shared by every lane and
every batch of that instance:

- **A budget, estimated before the call.** A call reserves its tokens first: its prompt
  (characters / 4, the instructions and the input) plus its ``max_tokens``, or, without
  one, the answer its alias has been giving (``AnswerEstimate``: learned from the
  answers' ``usage``, ``DEFAULT_ANSWER_TOKENS`` until the first); the reservation is
  corrected to the answer's ``usage`` when it comes back, and returned whole when the
  call fails. Like the service, the gate enforces a minute's quota over short windows
  (``WINDOW_SECONDS``: at most a sixth of it at once, refilled continuously), so a burst
  never asks for what the service would refuse.
- **A share of the deployment that follows demand.** The quota is the deployment's,
  shared by every instance of the app. Each instance publishes the tokens its calls wait
  for (its demand, high priority weighted up) and takes the share of the quota its
  demand is of everyone's (``shared.inference.instances``: ``InstanceRegistry``); an
  instance without work keeps a small floor. So the budget flows to the instances that
  have work, whatever their number. The service's remaining-budget headers
  (``x-ratelimit-remaining-tokens`` / ``-requests``, read from every answer: the
  deployment's own view, whoever else uses it) say what the deployment takes right now,
  and this instance never holds more than that (over a sliding minute, more than its
  share of it: ``observe``).
- **Throttling is the deployment's state, not a request's fault.** A 429 (``Throttled``)
  pauses every call of the deployment in this instance until the time the service asked
  for; the call that met it waits and goes again, without counting as an attempt. Each
  429 also teaches the gate headroom: calls wait for a little more room than they reserve,
  shrinking back as calls go through, since the service counted more than the gate did.
- **High priority first, then the earliest deadline.** Waiting calls are admitted by
  priority (high, normal, low), and within one by their request's deadline, earliest
  first (a request without one goes last). Requests with the same ``deadline_seconds``
  so go in the order they were accepted, whatever the order their messages reached the
  gate in: a message given back for want of capacity comes back behind newer ones in its
  queue, and takes its turn back at the gate instead of expiring behind them.
- **A lock is not a waiting room.** A call whose expected wait (the tokens ahead of it in
  this instance's line, and everyone's demand against the whole quota) is longer than its
  bound (the request's deadline, and the gate's ``max_wait``, well below the lock renewal
  limit) is given up at once with ``CapacityExhausted``, and so is one that waited that
  long: the processor reschedules its message without an attempt, to come back as the
  line shortens. An instance so holds only the calls its share serves within the bound.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import astuple, dataclass, field
from typing import Any, Final, Protocol

from shared.clock import MonotonicClock
from shared.contracts import Priority
from shared.errors import CapacityExhausted, Throttled
from shared.inference import InferenceInput, ModelAnswer, ModelClient, reads_as_text
from shared.inference.catalog import Capacity, ModelCard
from shared.inference.fading import FadingTotal
from shared.inference.served import ServedModel
from shared.inference.tenant_shares import TenantShares, equal_weights

WINDOW_SECONDS: Final = 10.0
DEFAULT_ANSWER_TOKENS: Final = 512
RANK: Final = {Priority.HIGH: 0, Priority.NORMAL: 1, Priority.LOW: 2}
# How much a waiting token of each priority counts in an instance's demand: an instance
# holding high-priority work gets a larger part of the quota until it is done (RANK's
# order); within an instance, high priority goes first anyway.
DEMAND_WEIGHT: Final = {0: 4.0, 1: 1.0, 2: 0.5}
# What a 429 adds to the room a call waits for, and how that room shrinks back with each
# call admitted: the gate learns how much more the service counts than it reserves, until
# a 429 is rare. A service that counts a call's whole answer allowance on arrival (over a
# sliding minute above all) needs a room of a call or two: a larger step learns it in a
# few 429s, a slower decay keeps it. Measured in bench/model_capacity.py's ``m24k`` cells:
# 64 and 0.99 left 6-7% of calls refused, this pair under 5% (docs/models.md).
HEADROOM_STEP: Final = 128.0
HEADROOM_DECAY: Final = 0.995
# Over about how long the tokens served by priority are counted (``high_share``).
SERVED_SECONDS: Final = 60.0


@dataclass(frozen=True)
class Demand:
    """What one instance's calls of one deployment wait for or hold: ``weighted`` (tokens
    times their priority's ``DEMAND_WEIGHT``: what shares follow) and ``tokens`` (what
    the deployment must still serve for them: what waits follow); and the tokens it
    served lately (``served``, about ``SERVED_SECONDS``), ``high`` of them for high
    priority: summed over the instances, what high priority takes of the deployment
    (``DeploymentGate.high_share``)."""

    weighted: float = 0.0
    tokens: float = 0.0
    high: float = 0.0
    served: float = 0.0

    def most(self, other: Demand) -> Demand:
        """The larger of each part (a peak over time)."""
        pairs = zip(astuple(self), astuple(other), strict=True)
        return Demand(*(max(mine, theirs) for mine, theirs in pairs))


class Fleet(Protocol):
    """The other instances, as a gate needs them (``instances.InstanceRegistry``)."""

    def share(self, gate: str) -> float:
        """This instance's part of the deployment's quota now (0 < share <= 1)."""
        ...

    def tokens_elsewhere(self, gate: str) -> float:
        """The tokens the other instances' calls of the deployment wait for or hold."""
        ...

    def served_elsewhere(self, gate: str) -> tuple[float, float]:
        """The tokens the other instances served of the deployment lately: for high
        priority, and in all."""
        ...

    def demand_changed(self) -> None:
        """This instance's demand started or stopped: say so before the next heartbeat
        (it must not block: gates call it holding their lock)."""
        ...


class Alone:
    """A fleet of one: the whole quota, nobody else waiting (tests, one process)."""

    def share(self, gate: str) -> float:
        return 1.0

    def tokens_elsewhere(self, gate: str) -> float:
        return 0.0

    def served_elsewhere(self, gate: str) -> tuple[float, float]:
        return 0.0, 0.0

    def demand_changed(self) -> None:
        return None


@dataclass
class _Bucket:
    """A minute's quota scaled to the window (``share``: this instance's part of it)."""

    per_minute: int
    level: float = 0.0
    updated: float | None = None  # None: never read, so full (or empty: ``starts_full``)
    starts_full: bool = True

    def capacity(self, share: float) -> float:
        return max(1.0, self.per_minute * share * WINDOW_SECONDS / 60)

    def rate(self, share: float) -> float:
        return max(self.per_minute * share / 60, 1e-9)

    def refill(self, now: float, share: float) -> None:
        if self.updated is None:
            self.level = self.capacity(share) if self.starts_full else 0.0
        else:
            self.level = min(
                self.capacity(share), self.level + (now - self.updated) * self.rate(share)
            )
        self.updated = now

    def wait_for(self, amount: float, share: float) -> float:
        """Until ``amount`` may go (one larger than the window goes once it is full)."""
        needed = min(amount, self.capacity(share))
        return 0.0 if self.level >= needed else (needed - self.level) / self.rate(share)

    def wait_behind(self, ahead: float, share: float) -> float:
        """Until ``ahead`` (the calls before one, and its own) has gone at this rate."""
        return max(0.0, ahead - self.level) / self.rate(share)

    def clamp(self, available: float) -> None:
        """Never more than what the service says the deployment takes right now, read
        as its limiter means it (``DeploymentGate.observe``)."""
        self.level = min(self.level, available)


@dataclass(frozen=True)
class Reservation:
    tokens: int
    rank: int = RANK[Priority.NORMAL]


@dataclass
class GateStats:
    """What one gate did (benchmarks and logs)."""

    admitted: int = 0
    throttled: int = 0
    gave_up: int = 0
    waited_seconds: float = 0.0


@dataclass(order=True)
class _Waiter:
    rank: int
    due: float  # the request's deadline on the gate's clock (inf: none)
    sequence: int
    tokens: int = field(compare=False)
    tenant: str = field(default="", compare=False)


@dataclass(frozen=True)
class Booking:
    """Tokens a message of ``tenant`` holds of its share until its processing ends
    (``DeploymentGate.book``; 0: nothing booked, the gate counts no tokens)."""

    tenant: str
    tokens: int


class DeploymentGate:
    """One deployment's budget in this instance (see the module doc)."""

    def __init__(
        self,
        name: str,
        capacity: Capacity,
        *,
        fleet: Fleet | None = None,
        key: str | None = None,
        clock: MonotonicClock = time.monotonic,
        max_wait: float = 60.0,
        weight_of: Callable[[str], float] = equal_weights,
    ) -> None:
        self.name = name
        self.key = key or name
        # Alone, a gate starts with a full window. Among other instances it starts empty:
        # it cannot know what they spent, and a burst that wakes them all at once must not
        # spend a window in each.
        alone = fleet is None
        self._tokens = (
            _Bucket(capacity.tokens_per_minute, starts_full=alone)
            if capacity.tokens_per_minute
            else None
        )
        self._requests = (
            _Bucket(capacity.requests_per_minute, starts_full=alone)
            if capacity.requests_per_minute
            else None
        )
        self._limiter = capacity.limiter
        self._fleet: Fleet = fleet or Alone()
        self.clock = clock
        self.max_wait = max_wait
        self._paused_until = 0.0
        self._condition = threading.Condition()
        self._waiting: list[_Waiter] = []
        self._holding: dict[int, float] = {}  # rank -> tokens reserved by calls under way
        self._peak = Demand()  # the most demanded since the last ``demand()``
        self._headroom = 0.0  # tokens a call waits for beyond its own (learned from 429s)
        # Tokens served lately (``SERVED_SECONDS``): to high priority, and in all.
        self._served_high = FadingTotal(SERVED_SECONDS, _at=clock())
        self._served_all = FadingTotal(SERVED_SECONDS, _at=clock())
        self._sequence = itertools.count()
        self._tenants = TenantShares(weight_of)
        self.stats = GateStats()

    @property
    def limited(self) -> bool:
        return self._tokens is not None or self._requests is not None

    @property
    def tokens_per_minute(self) -> int | None:
        """The deployment's whole token quota (None: not limited by tokens)."""
        return self._tokens.per_minute if self._tokens is not None else None

    def demand(self) -> Demand:
        """The most tokens this instance's calls waited for or held since the last time it
        was asked (the fleet's heartbeat): the moment between two batches, when nothing
        waits, does not read as an instance without work."""
        with self._condition:
            peak, self._peak = self._peak, self._demand()
            return peak.most(self._peak)

    def _demand(self) -> Demand:
        by_rank = dict(self._holding)
        for waiter in self._waiting:
            by_rank[waiter.rank] = by_rank.get(waiter.rank, 0.0) + waiter.tokens
        weighted = sum(DEMAND_WEIGHT[rank] * tokens for rank, tokens in by_rank.items())
        high, served = self._served_by(self.clock())
        return Demand(weighted, sum(by_rank.values()), high, served)

    def _share(self) -> float:
        return self._fleet.share(self.key)

    def _buckets(self, tokens: int) -> list[tuple[_Bucket, int]]:
        chosen = [(self._tokens, tokens), (self._requests, 1)]
        return [(bucket, amount) for bucket, amount in chosen if bucket is not None]

    def _wait_needed(self, tokens: int, now: float, share: float) -> float:
        paused = max(0.0, self._paused_until - now)
        buckets = self._buckets(tokens)
        for bucket, _ in buckets:
            bucket.refill(now, share)
        needs = [(b, n + self._headroom if b is self._tokens else n) for b, n in buckets]
        return max([paused, *(b.wait_for(n, share) for b, n in needs)])

    def _expected_wait(self, waiter: _Waiter, now: float, share: float) -> float:
        """How long ``waiter`` should still wait: behind the calls ahead of it in this
        instance's line at this instance's share, or, if shorter, behind every instance's
        demand at the whole quota's pace (the share follows demand within a heartbeat)."""
        ahead_tokens, ahead_calls = self._ahead(waiter)
        paused = max(0.0, self._paused_until - now)
        here = paused
        everywhere = paused
        if self._tokens is not None:
            tokens = ahead_tokens + self._headroom
            here = max(here, self._tokens.wait_behind(tokens, share))
            elsewhere = self._fleet.tokens_elsewhere(self.key)
            everywhere = max(everywhere, self._tokens.wait_behind(tokens + elsewhere, 1.0))
        if self._requests is not None:
            here = max(here, self._requests.wait_behind(ahead_calls, share))
            everywhere = max(everywhere, self._requests.wait_behind(ahead_calls, 1.0))
        return min(here, everywhere)

    def _ahead(self, waiter: _Waiter) -> tuple[float, float]:
        """The tokens and calls that go before ``waiter``, its own included: every call of
        a higher priority, its tenant's earlier ones, and of each other tenant of its
        priority as much as its weight takes while ``waiter``'s tenant takes its own."""
        better = [w for w in self._waiting if w.rank < waiter.rank]
        same = [w for w in self._waiting if w.rank == waiter.rank]
        own = [w.tokens for w in same if w.tenant == waiter.tenant and w <= waiter]
        tokens = float(sum(w.tokens for w in better) + sum(own))
        calls = float(len(better) + len(own))
        others: dict[str, list[int]] = {}
        for w in same:
            if w.tenant != waiter.tenant:
                others.setdefault(w.tenant, []).append(w.tokens)
        own_weight = self._tenants.weight(waiter.tenant)
        for tenant, theirs in others.items():
            theirs_total = max(sum(theirs), 1)
            taken = min(1.0, sum(own) * self._tenants.weight(tenant) / own_weight / theirs_total)
            tokens += theirs_total * taken
            calls += len(theirs) * taken
        return tokens, calls

    def _next(self) -> _Waiter:
        """The call that goes next: of the highest priority waiting, the tenant least
        served for its weight (``TenantShares``), and of its calls the earliest due."""
        rank = min(w.rank for w in self._waiting)
        first = [w for w in self._waiting if w.rank == rank]
        tenant = self._tenants.next_tenant({w.tenant for w in first})
        return min(w for w in first if w.tenant == tenant)

    def acquire(
        self,
        tokens: int,
        priority: Priority,
        wait_limit: float | None = None,
        *,
        due: float = math.inf,
        tenant: str = "",
    ) -> Reservation:
        """Reserve ``tokens`` and one request, waiting behind higher priorities, the
        tenants served less for their weight and earlier deadlines (``due``, on the gate's
        clock), and for the budget; CapacityExhausted, at once, when that is expected to
        take longer than ``wait_limit`` (and the gate's ``max_wait``), or when it did."""
        limit = self.max_wait if wait_limit is None else min(wait_limit, self.max_wait)
        started = self.clock()
        waiter = _Waiter(RANK[priority], due, next(self._sequence), tokens, tenant)
        with self._condition:
            idle = not self._waiting and not self._holding
            waiting = {w.tenant for w in self._waiting}
            if tenant not in waiting:
                self._tenants.activate(tenant, waiting)
            self._waiting.append(waiter)
            self._peak = self._peak.most(self._demand())
            if idle:
                self._fleet.demand_changed()
            try:
                while True:
                    now = self.clock()
                    share = self._share()
                    wait = self._wait_needed(tokens, now, share)
                    if self._next() is waiter and wait <= 0:
                        for bucket, amount in self._buckets(tokens):
                            bucket.level -= amount
                        self._holding[waiter.rank] = self._holding.get(waiter.rank, 0) + tokens
                        self._tenants.admitted(tenant, tokens, now)
                        self._headroom *= HEADROOM_DECAY
                        self.stats.admitted += 1
                        self.stats.waited_seconds += now - started
                        return Reservation(tokens, waiter.rank)
                    expected = self._expected_wait(waiter, now, share)
                    if now - started + expected > limit:
                        self.stats.gave_up += 1
                        raise CapacityExhausted(
                            f"deployment {self.name} has no capacity for this call within "
                            f"{limit:.0f}s (expected wait {expected:.0f}s)",
                            retry_after=max(expected - limit / 2, 1.0),
                        )
                    # The first in line waits for its budget; the others for their turn
                    # (a notification), looking again each second for their time limit.
                    first = self._next() is waiter
                    self._condition.wait(timeout=min(max(wait, 0.01), 1.0) if first else 1.0)
            finally:
                self._waiting.remove(waiter)
                self._after_change()

    def settle(self, reservation: Reservation, used_tokens: int | None) -> None:
        """The call's real tokens (None: it failed, nothing was spent): the difference
        goes back to the budget."""
        with self._condition:
            held = self._holding.get(reservation.rank, 0) - reservation.tokens
            if held > 0:
                self._holding[reservation.rank] = held
            else:
                self._holding.pop(reservation.rank, None)
            if self._tokens is not None:
                spent = 0 if used_tokens is None else used_tokens
                self._tokens.level += reservation.tokens - spent
            if used_tokens is not None:
                self._count_served(reservation.rank, used_tokens)
            if self._requests is not None and used_tokens is None:
                self._requests.level += 1
            self._after_change()

    def _served_by(self, now: float) -> tuple[float, float]:
        """The tokens served lately, high priority's and all, faded to ``now``."""
        return self._served_high.value(now), self._served_all.value(now)

    def _count_served(self, rank: int, tokens: int) -> None:
        now = self.clock()
        self._served_high.add(tokens if rank == RANK[Priority.HIGH] else 0, now)
        self._served_all.add(tokens, now)

    def high_share(self) -> float:
        """The part of the deployment that high priority took lately (about
        ``SERVED_SECONDS``): the tokens every instance served it, over what every
        instance served or, when that is less, what the deployment could have served
        meanwhile. What high-priority calls, arriving while another request waits, take
        of the deployment before it (intake's admission). Every instance's, since one
        instance's mix is not the deployment's: whichever receives first takes more of a
        short queue. Of the deployment's quota, not only of what was served: in the first
        seconds of a burst the few calls served, high priority's first among them, would
        say that high priority takes nearly all, and a normal request's wait would be
        counted ten times too long."""
        with self._condition:
            high, served = self._served_by(self.clock())
            quota = self._tokens.rate(1.0) * SERVED_SECONDS if self._tokens is not None else 0.0
        high_elsewhere, elsewhere = self._fleet.served_elsewhere(self.key)
        total = max(served + elsewhere, quota)
        return (high + high_elsewhere) / total if total > 0 else 0.0

    def _after_change(self) -> None:
        if not self._waiting and not self._holding:
            self._fleet.demand_changed()
        self._tenants.forget_idle({w.tenant for w in self._waiting})
        self._condition.notify_all()

    def book(
        self, tenant: str, tokens: int, horizon: float, *, paced: bool = False
    ) -> Booking | float:
        """Book ``tokens`` of ``tenant``'s share for a message about to be read (a
        ``Booking`` to ``release`` when it ends); or, when the tenant already holds
        ``horizon`` seconds of work at its rate here, the seconds after which the message
        should come back (``TenantShares.book``: its part of this instance's share of the
        deployment; an instance that holds little has a small share, and grows it one
        message at a time, since a tenant holding nothing always books). ``paced``: intake
        released the message at its tenant's part of the deployment. A gate that counts
        no tokens, or a horizon of 0, books nothing."""
        with self._condition:
            if self._tokens is None or horizon <= 0:
                return Booking(tenant, 0)
            rates = (self._tokens.rate(self._share()), self._tokens.rate(1.0))
            back = self._tenants.book(tenant, tokens, rates, horizon, self.clock(), paced=paced)
            return Booking(tenant, tokens) if back <= 0 else back

    def release_delay(self, tenant: str, tokens: int, horizon: float) -> float:
        """The seconds after which a new request of ``tenant`` should reach the queue, so
        that the queue holds about ``horizon`` seconds of its work at its part of the
        deployment's rate (``TenantShares.release_delay``; 0: now). A part of the whole
        deployment's rate, not of this instance's share: a platform that spreads one
        tenant's requests over the instances releases them faster, and the excess waits
        in the queue (beside a tenant that is not paced, the processors' bookings send it
        back)."""
        with self._condition:
            if self._tokens is None or horizon <= 0:
                return 0.0
            rate = self._tokens.rate(1.0)
            return self._tenants.release_delay(tenant, tokens, rate, horizon, self.clock())

    def respace_releases(
        self, scheduled: Mapping[str, Sequence[int]], horizon: float
    ) -> dict[str, list[float]] | None:
        """New release delays for the tenants' scheduled work (``TenantShares.respace``),
        at the whole deployment's rate as ``release_delay``; None for a gate that counts
        no tokens (nothing of it was paced)."""
        with self._condition:
            if self._tokens is None or horizon <= 0:
                return None
            rate = self._tokens.rate(1.0)
            return self._tenants.respace(scheduled, rate, horizon, self.clock())

    def release(self, booking: Booking) -> None:
        """The booked message's processing ended, however it did."""
        if booking.tokens:
            with self._condition:
                self._tenants.release(booking.tenant, booking.tokens)

    def observe(self, remaining_tokens: int | None, remaining_requests: int | None) -> None:
        """What the service says the deployment has left (its rate-limit headers), read
        for what its limiter means by them. A window limiter counts the minute, of which a
        window's part may go now; the window refills, so what is left is not this
        instance's alone to hold back from. A sliding minute says what may go now, until
        whole calls leave the minute: every instance reads the same figure, so each takes
        its share of it (all of it, the instances would spend it several times over)."""
        with self._condition:
            share, now = self._share(), self.clock()
            usable = WINDOW_SECONDS / 60 if self._limiter == "window" else share
            for bucket, left in (
                (self._tokens, remaining_tokens),
                (self._requests, remaining_requests),
            ):
                if bucket is not None and left is not None:
                    bucket.refill(now, share)
                    bucket.clamp(left * usable)

    def throttled(self, retry_after: float | None) -> None:
        """The service refused a call for its quota: no call of this deployment goes out
        in this instance before the time it asked for, and calls wait for more room than
        they reserve from now on (``HEADROOM_STEP``): the service counted more for a call
        than the gate did (its own answer allowance before the answer came, a limiter
        that lets nothing go until a whole call has left the minute)."""
        with self._condition:
            self.stats.throttled += 1
            self._headroom += HEADROOM_STEP
            wait = retry_after if retry_after is not None else 1.0
            self._paused_until = max(self._paused_until, self.clock() + wait)
            self._condition.notify_all()


class AnswerEstimate:
    """The answer tokens an alias's calls are counted for before they run, without a
    ``max_tokens``: learned from the answers' ``usage`` (an exponential average with a
    margin, so a run of longer answers raises it within a few calls), and
    ``DEFAULT_ANSWER_TOKENS`` until the first answer. A wrong guess costs little: the
    reservation is corrected to the real tokens when the answer comes. The same average
    without the margin tells intake what a request of the alias costs (``mean``)."""

    SMOOTHING: Final = 0.2
    MARGIN: Final = 1.25

    def __init__(self) -> None:
        self._average: float | None = None
        self._lock = threading.Lock()

    def tokens(self) -> int:
        with self._lock:
            if self._average is None:
                return DEFAULT_ANSWER_TOKENS
            return max(1, math.ceil(self._average * self.MARGIN))

    def mean(self) -> float | None:
        """The average so far (None before the first answer)."""
        with self._lock:
            return self._average

    def learn(self, answer_tokens: int) -> None:
        with self._lock:
            if self._average is None:
                self._average = float(answer_tokens)
            else:
                self._average += self.SMOOTHING * (answer_tokens - self._average)


def estimated_tokens(
    instructions: str, text: str, parameters: Mapping[str, object], answer: int | None = None
) -> int:
    """What a call is counted for before it runs: its prompt at four characters a token,
    and its ``answer_allowance``."""
    return prompt_tokens(len(instructions) + len(text)) + answer_allowance(parameters, answer)


def answer_allowance(parameters: Mapping[str, object], answer: int | None = None) -> int:
    """The longest answer a call allows (``max_tokens``: the service counts it so too),
    else ``answer`` (what the alias's answers have been), else ``DEFAULT_ANSWER_TOKENS``."""
    allowed = parameters.get("max_tokens")
    if isinstance(allowed, int) and not isinstance(allowed, bool):
        return allowed
    return answer if answer is not None else DEFAULT_ANSWER_TOKENS


def prompt_tokens(characters: int) -> int:
    """A prompt of ``characters`` at four characters a token, as the gate counts it."""
    return math.ceil(characters / 4)


class BudgetedModel:
    """A ``ModelClient`` whose calls go through their deployment's gate; a 429 pauses the
    gate and the call goes again, without counting as an attempt."""

    def __init__(self, card: ModelCard, inner: ModelClient, gate: DeploymentGate) -> None:
        self._card = card
        self._inner = inner
        self.gate = gate
        self.answers = AnswerEstimate()
        self.calls = AnswerEstimate()  # the whole call's tokens: what a request costs
        self.system = inner.system

    def typical(self, text_chars: int, parameters: Mapping[str, Any]) -> int:
        """What a call on a text of ``text_chars`` characters typically costs: its prompt
        and the answers' average so far (none before the first: a guess on the low side).
        Tenants' shares are paced by it (a message's booking before its input is read,
        intake's release into the queue): too high, it would hold back work the deployment
        could serve; too low, a little more waits in the queue than the horizon."""
        prompt = prompt_tokens(len(self._card.task.instructions(parameters)) + text_chars)
        return prompt + math.ceil(self.answers.mean() or 0)

    def infer(self, request: InferenceInput) -> ModelAnswer:
        text = request.text() if reads_as_text(request.media_type) else ""
        tokens = estimated_tokens(
            self._card.task.instructions(request.parameters),
            text,
            request.parameters,
            self.answers.tokens(),
        )
        # The request's deadline orders it at the gate; it and the gate's bound, from now,
        # bound its whole wait, 429 pauses included.
        now = self.gate.clock()
        due = math.inf if request.wait_limit is None else now + request.wait_limit
        until = min(now + self.gate.max_wait, due)
        while True:
            left = until - self.gate.clock()
            reservation = self.gate.acquire(
                tokens, request.priority, left, due=due, tenant=request.tenant
            )
            try:
                answer = self._inner.infer(request)
            except Throttled as throttled:
                self.gate.settle(reservation, None)
                self.gate.throttled(throttled.retry_after)
                self.gate.observe(throttled.remaining_tokens, throttled.remaining_requests)
                continue  # not an attempt: the gate decides when it goes again
            except Exception:
                self.gate.settle(reservation, None)
                raise
            usage = answer.usage.total_tokens if answer.usage is not None else reservation.tokens
            if answer.usage is not None:
                self.answers.learn(answer.usage.output_tokens)
                self.calls.learn(answer.usage.total_tokens)
            self.gate.settle(reservation, usage)
            self.gate.observe(answer.remaining_tokens, answer.remaining_requests)
            return answer


@dataclass(frozen=True)
class Pace:
    """How fast a deployment clears an alias's requests (``intake.ports.ModelPace``)."""

    tokens_per_minute: int
    cost: float  # the tokens one request of the alias costs
    high_share: float = 0.0  # the part of the deployment high priority took lately


@dataclass(frozen=True)
class Release:
    """A request intake scheduled to reach the queue later (``TenantPacing.respace``)."""

    tenant: str
    model: str
    text_chars: int
    parameters: Mapping[str, Any]
    delay: float  # the seconds until it is due


class ServedPace:
    """Implements ``intake.ports.ModelPace`` and ``TenantPacing`` from the gated models: an alias's
    deployment quota (its catalog ``capacity``), what its calls have cost (learned from
    ``usage``; before the first answer, the asking request's prompt, or without one a
    prompt of ``DEFAULT_PROMPT_TOKENS`` and an answer of ``DEFAULT_ANSWER_TOKENS``), and
    what high priority took of the deployment lately (``DeploymentGate.high_share``)."""

    DEFAULT_PROMPT_TOKENS: Final = 500

    def __init__(self, models: Mapping[str, ServedModel], release_horizon: float = 0.0) -> None:
        self._models = models
        self._release_horizon = release_horizon

    def release_delay(
        self, tenant: str, model: str, text_chars: int, parameters: Mapping[str, Any]
    ) -> float:
        """Implements ``intake.ports.TenantPacing`` from the alias's gate
        (``DeploymentGate.release_delay``, ``release_horizon`` seconds of the tenant's
        work in the queue); 0 for an alias whose deployment counts no tokens."""
        client = budgeted(self._models, model)
        if client is None or self._release_horizon <= 0:
            return 0.0
        tokens = client.typical(text_chars, parameters)
        return client.gate.release_delay(tenant, tokens, self._release_horizon)

    def respace(self, releases: Sequence[Release]) -> list[float]:
        """Implements ``intake.ports.TenantPacing.respace``: the releases of each
        deployment (all of them: ``pacing_key``), by tenant in their order, spaced again
        by the deployment's gate (``DeploymentGate.respace_releases``); a release of an
        alias whose deployment counts no tokens keeps its delay."""
        delays = [release.delay for release in releases]
        gates: dict[str, tuple[DeploymentGate, dict[str, list[tuple[int, int]]]]] = {}
        for index in sorted(range(len(releases)), key=lambda i: releases[i].delay):
            release = releases[index]
            client = budgeted(self._models, release.model)
            if client is None or self._release_horizon <= 0:
                continue
            _, tenants = gates.setdefault(client.gate.key, (client.gate, {}))
            tokens = client.typical(release.text_chars, release.parameters)
            tenants.setdefault(release.tenant, []).append((index, tokens))
        for gate, tenants in gates.values():
            works = {tenant: [tokens for _, tokens in items] for tenant, items in tenants.items()}
            spaced = gate.respace_releases(works, self._release_horizon)
            if spaced is None:
                continue
            for tenant, items in tenants.items():
                for (index, _), delay in zip(items, spaced[tenant], strict=True):
                    delays[index] = delay
        return delays

    def pacing_key(self, model: str) -> str:
        """Implements ``intake.ports.TenantPacing.pacing_key``: aliases on one deployment
        share its gate, and so its tenants' parts."""
        client = budgeted(self._models, model)
        return client.gate.key if client is not None else model

    def pace(
        self,
        model: str,
        text_chars: int | None = None,
        parameters: Mapping[str, Any] | None = None,
    ) -> Pace | None:
        """Implements ``intake.ports.ModelPace``. Before the alias's first answer, a call
        costs what the asking request's prompt does (``BudgetedModel.typical``: the answer
        not known yet, on the low side), when its text's length is given: a guess of a
        whole ``DEFAULT_ANSWER_TOKENS`` answer made the first waits two or three times
        too long, and refused work the deployment could have served."""
        client = budgeted(self._models, model)
        if client is None or client.gate.tokens_per_minute is None:
            return None
        cost = client.calls.mean()
        if not cost and text_chars is not None:
            cost = client.typical(text_chars, parameters or {})
        if not cost:
            cost = self.DEFAULT_PROMPT_TOKENS + DEFAULT_ANSWER_TOKENS
        return Pace(client.gate.tokens_per_minute, cost, client.gate.high_share())


def budgeted(models: Mapping[str, ServedModel], alias: str) -> BudgetedModel | None:
    """``alias``'s client behind its deployment's gate (None: not served, or not gated)."""
    served = models.get(alias)
    client = served.client if served is not None else None
    return client if isinstance(client, BudgetedModel) else None


def gate_key(card: ModelCard) -> str:
    """Aliases on one deployment share its quota: they share a gate."""
    return f"{card.provider}|{card.text_option('endpoint') or ''}|{card.deployment or card.alias}"
