"""Model capacity: calls to a deployment within its tokens and requests per minute.

A model deployment's quota is the limit the broker exists to protect: twenty workers that
each get a 429 are worse than five that do not. Each deployment of the catalog that
declares a ``capacity`` gets a ``DeploymentGate`` per instance, shared by every lane and
every batch of that instance:

- **A budget, estimated before the call.** A call reserves its tokens first: its prompt
  (characters / 4, the instructions and the input) plus its ``max_tokens``, or
  ``DEFAULT_ANSWER_TOKENS``; the reservation is corrected to the answer's ``usage`` when it
  comes back, and returned whole when the call fails. Like the service, the gate enforces
  a minute's quota over short windows (``WINDOW_SECONDS``: at most a sixth of it at once,
  refilled continuously), so a burst never asks for what the service would refuse.
- **A share of the deployment.** The quota is the deployment's, shared by every instance
  of the app: each instance takes ``1 / live instances`` of it (``instances``: the count
  ``InstanceRegistry`` keeps from the instances' heartbeats), and never more than what the
  service says is left (``x-ratelimit-remaining-tokens`` / ``-requests``, read from every
  answer: the deployment's own view, whoever else uses it).
- **Throttling is the deployment's state, not a request's fault.** A 429 (``Throttled``)
  pauses every call of the deployment in this instance until the time the service asked
  for; the call that met it waits and goes again, without counting as an attempt.
- **High priority first.** Waiting calls are admitted by priority (high, normal, low), in
  arrival order within one.

A call that would wait longer than its bound (the request's deadline, and the gate's
``max_wait``, below the lock renewal limit) is given up with ``CapacityExhausted``: the
processor reschedules its message without an attempt.
"""

from __future__ import annotations

import heapq
import itertools
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from shared.clock import MonotonicClock
from shared.contracts import Priority
from shared.errors import CapacityExhausted, Throttled
from shared.inference import InferenceInput, ModelAnswer, ModelClient, reads_as_text
from shared.inference.catalog import Capacity, ModelCard

WINDOW_SECONDS: Final = 10.0
DEFAULT_ANSWER_TOKENS: Final = 512
RANK: Final = {Priority.HIGH: 0, Priority.NORMAL: 1, Priority.LOW: 2}


@dataclass
class _Bucket:
    """A minute's quota scaled to the window (``share``: this instance's part of it)."""

    per_minute: int
    level: float = 0.0
    updated: float | None = None  # None: never read, so full

    def capacity(self, share: float) -> float:
        return max(1.0, self.per_minute * share * WINDOW_SECONDS / 60)

    def rate(self, share: float) -> float:
        return self.per_minute * share / 60

    def refill(self, now: float, share: float) -> None:
        if self.updated is None:
            self.level = self.capacity(share)
        else:
            self.level = min(
                self.capacity(share), self.level + (now - self.updated) * self.rate(share)
            )
        self.updated = now

    def wait_for(self, amount: float, share: float) -> float:
        needed = min(amount, self.capacity(share))
        return 0.0 if self.level >= needed else (needed - self.level) / self.rate(share)

    def clamp(self, remaining_per_minute: int, share: float) -> None:
        """Never more than the service says the deployment has left."""
        self.level = min(self.level, remaining_per_minute * share * WINDOW_SECONDS / 60)


@dataclass(frozen=True)
class Reservation:
    tokens: int


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
    sequence: int
    tokens: int = field(compare=False)


class DeploymentGate:
    """One deployment's budget in this instance (see the module doc)."""

    def __init__(
        self,
        name: str,
        capacity: Capacity,
        *,
        instances: Callable[[], int] = lambda: 1,
        clock: MonotonicClock = time.monotonic,
        max_wait: float = 300.0,
    ) -> None:
        self.name = name
        self._tokens = _Bucket(capacity.tokens_per_minute) if capacity.tokens_per_minute else None
        self._requests = (
            _Bucket(capacity.requests_per_minute) if capacity.requests_per_minute else None
        )
        self._instances = instances
        self.clock = clock
        self.max_wait = max_wait
        self._paused_until = 0.0
        self._condition = threading.Condition()
        self._waiting: list[_Waiter] = []
        self._sequence = itertools.count()
        self.stats = GateStats()

    @property
    def limited(self) -> bool:
        return self._tokens is not None or self._requests is not None

    def _share(self) -> float:
        return 1.0 / max(1, self._instances())

    def _buckets(self, tokens: int) -> list[tuple[_Bucket, int]]:
        chosen = [(self._tokens, tokens), (self._requests, 1)]
        return [(bucket, amount) for bucket, amount in chosen if bucket is not None]

    def _wait_needed(self, tokens: int, now: float, share: float) -> float:
        paused = max(0.0, self._paused_until - now)
        buckets = self._buckets(tokens)
        for bucket, _ in buckets:
            bucket.refill(now, share)
        return max([paused, *(b.wait_for(n, share) for b, n in buckets)])

    def acquire(
        self, tokens: int, priority: Priority, wait_limit: float | None = None
    ) -> Reservation:
        """Reserve ``tokens`` and one request, waiting behind higher priorities and for the
        budget; CapacityExhausted when that would take longer than ``wait_limit`` (and
        the gate's ``max_wait``)."""
        limit = self.max_wait if wait_limit is None else min(wait_limit, self.max_wait)
        started = self.clock()
        waiter = _Waiter(RANK[priority], next(self._sequence), tokens)
        with self._condition:
            heapq.heappush(self._waiting, waiter)
            try:
                while True:
                    now = self.clock()
                    share = self._share()
                    wait = self._wait_needed(tokens, now, share)
                    if self._waiting[0] is waiter and wait <= 0:
                        for bucket, amount in self._buckets(tokens):
                            bucket.level -= amount
                        self.stats.admitted += 1
                        self.stats.waited_seconds += now - started
                        return Reservation(tokens)
                    if now - started + max(wait, 0.0) > limit:
                        self.stats.gave_up += 1
                        raise CapacityExhausted(
                            f"deployment {self.name} has no capacity for this call within "
                            f"{limit:.0f}s",
                            retry_after=max(wait, 1.0),
                        )
                    # The first in line waits for its budget; the others for their turn
                    # (a notification), looking again each second for their time limit.
                    first = self._waiting[0] is waiter
                    self._condition.wait(timeout=min(max(wait, 0.01), 1.0) if first else 1.0)
            finally:
                self._waiting.remove(waiter)
                heapq.heapify(self._waiting)
                self._condition.notify_all()

    def settle(self, reservation: Reservation, used_tokens: int | None) -> None:
        """The call's real tokens (None: it failed, nothing was spent): the difference
        goes back to the budget."""
        with self._condition:
            if self._tokens is not None:
                spent = 0 if used_tokens is None else used_tokens
                self._tokens.level += reservation.tokens - spent
            if self._requests is not None and used_tokens is None:
                self._requests.level += 1
            self._condition.notify_all()

    def observe(self, remaining_tokens: int | None, remaining_requests: int | None) -> None:
        """What the service says the deployment has left (its rate-limit headers)."""
        with self._condition:
            share, now = self._share(), self.clock()
            for bucket, left in (
                (self._tokens, remaining_tokens),
                (self._requests, remaining_requests),
            ):
                if bucket is not None and left is not None:
                    bucket.refill(now, share)
                    bucket.clamp(left, share)

    def throttled(self, retry_after: float | None) -> None:
        """The service refused a call for its quota: no call of this deployment goes out
        in this instance before the time it asked for."""
        with self._condition:
            self.stats.throttled += 1
            wait = retry_after if retry_after is not None else 1.0
            self._paused_until = max(self._paused_until, self.clock() + wait)
            self._condition.notify_all()


def estimated_tokens(instructions: str, text: str, parameters: Mapping[str, object]) -> int:
    """What a call is counted for before it runs: its prompt at four characters a token,
    and the longest answer it allows."""
    answer = parameters.get("max_tokens")
    allowed = answer if isinstance(answer, int) and not isinstance(answer, bool) else None
    return math.ceil((len(instructions) + len(text)) / 4) + (allowed or DEFAULT_ANSWER_TOKENS)


class BudgetedModel:
    """A ``ModelClient`` whose calls go through their deployment's gate; a 429 pauses the
    gate and the call goes again, without counting as an attempt."""

    def __init__(self, card: ModelCard, inner: ModelClient, gate: DeploymentGate) -> None:
        self._card = card
        self._inner = inner
        self.gate = gate
        self.system = inner.system

    def infer(self, request: InferenceInput) -> ModelAnswer:
        text = request.text() if reads_as_text(request.media_type) else ""
        tokens = estimated_tokens(
            self._card.task.instructions(request.parameters), text, request.parameters
        )
        allowed = self.gate.max_wait
        if request.wait_limit is not None:
            allowed = min(allowed, request.wait_limit)
        until = self.gate.clock() + allowed
        while True:
            reservation = self.gate.acquire(tokens, request.priority, until - self.gate.clock())
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
            self.gate.settle(reservation, usage)
            self.gate.observe(answer.remaining_tokens, answer.remaining_requests)
            return answer


def gate_key(card: ModelCard) -> str:
    """Aliases on one deployment share its quota: they share a gate."""
    return f"{card.provider}|{card.text_option('endpoint') or ''}|{card.deployment or card.alias}"
