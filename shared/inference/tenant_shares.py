"""Tenants' fair shares of one deployment in one instance: whose call goes next, whose
message goes back to the broker until its turn, and when intake lets new work reach the
queue.

Tenants share every deployment (``tenants.json``: each tenant's ``weight``). A broker's
queue is first in, first out, so fairness needs three parts, all here, all per gate:

- **When new work reaches the queue** (``release_delay``, ``respace``): intake sends a
  tenant's request to the queue at once while the queue holds less than ``horizon``
  seconds of that tenant's work, and schedules the rest to arrive at the tenant's part
  of the deployment's rate: its weight's part among the tenants whose scheduled work
  still waits in the broker, the whole rate alone. Four hundred requests dropped at once
  so reach the queue a few at a time, another tenant's request, sent at once, waits
  behind a few seconds of them, not all, and two bursts reach it in the parts of their
  weights. When a tenant's scheduled work is all released, the others' is spaced again
  at their new parts (``respace``): intake calls those messages back and sends them
  earlier, so that the deployment is not left idle.
- **Whose call goes next** (``next_tenant``): among the calls waiting at the gate with
  the best priority, the tenant that has been served least for its weight, like a
  fair scheduler's virtual runtime: each tenant's ``virtual_time`` grows by the tokens
  of its admitted calls divided by its weight. A tenant that starts waiting takes the
  smallest virtual time of those already waiting (``activate``): it gets no credit for
  the time it sent nothing, and loses none for the backlog of another.
- **Whose message waits in the broker** (``book``): beside another tenant that gets no
  more than its share, a message of a tenant that already holds more than ``horizon``
  seconds of work at its rate goes back to the broker, scheduled for the end of its
  tenant's line, before anything is read for it: what intake did not pace (producers
  sending straight to the queue) and what came due before its turn. A tenant that
  stands ahead of another holding work here, for their weights, and whose messages come
  here more often, sends its message back whatever it holds, so that two producers'
  bursts, read in equal parts, are served in their weights' parts. Each tenant's rate
  is its weight's part of the instance's, or, while the others want no more than they
  get, what they leave (``served_rate``): a trickle does not slow a backlog down. The
  returns of one tenant are spaced at the deployment's rate, so that a backlog comes back
  a little at a time and never later than the deployment could serve it. Two bursts that
  intake paces here are not sent back for each other: the queue holds them in their
  weights' parts already.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from shared.inference.fading import FadingTotal

# Over about how long a tenant's served tokens make its rate (``served_rate``), and how
# lately another tenant must have been seen for a gate to send a message back (``book``).
SERVED_RATE_SECONDS: Final = 10.0
# Over about how long the messages read here count how often a tenant comes here
# (``_owes_a_turn``): longer than a rate's, since a few batches' reads are few, and one
# wrong answer sends the heavier tenant's message behind the whole queue.
READ_RATE_SECONDS: Final = 30.0


def equal_weights(tenant: str) -> float:
    """Every tenant weighs the same (no tenant catalog)."""
    return 1.0


@dataclass
class _Tenant:
    virtual_time: float = 0.0
    booked: float = 0.0  # tokens of its messages between ``book`` and ``release``
    returns_at: float = -math.inf  # when its last message sent back is due
    sent_back_at: float = -math.inf  # when it last had a message sent back
    released_until: float = -math.inf  # when the work intake sent so far has gone, at the rate
    paced_at: float = -math.inf  # when it last booked a message intake paced (any instance's)
    # Tokens served lately: the tenant's rate, and whether it was seen here lately.
    served: FadingTotal = field(default_factory=lambda: FadingTotal(SERVED_RATE_SECONDS))
    # Tokens of its messages read lately (booked or sent back): how often it comes here.
    read: FadingTotal = field(default_factory=lambda: FadingTotal(READ_RATE_SECONDS))


@dataclass
class TenantShares:
    """Each tenant's turn at one gate (see the module doc). Not thread-safe: the gate
    calls it holding its lock."""

    weight_of: Callable[[str], float] = equal_weights
    _tenants: dict[str, _Tenant] = field(default_factory=dict)
    _floor: float = 0.0  # the smallest virtual time of the tenants waiting, lately
    _now: float = -math.inf  # the latest time it was told

    def weight(self, tenant: str) -> float:
        return max(self.weight_of(tenant), 1e-6)

    def _tenant(self, tenant: str) -> _Tenant:
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant(virtual_time=self._floor)
        return state

    def activate(self, tenant: str, waiting: set[str]) -> None:
        """``tenant`` starts waiting (none of its calls waited): it takes the smallest
        virtual time of the tenants already waiting, if that is later than its own."""
        others = [self._tenants[t].virtual_time for t in waiting if t in self._tenants]
        floor = min(others) if others else self._floor
        self._floor = max(self._floor, floor)
        state = self._tenant(tenant)
        state.virtual_time = max(state.virtual_time, self._floor)

    def virtual_time(self, tenant: str) -> float:
        return self._tenant(tenant).virtual_time

    def next_tenant(self, candidates: set[str]) -> str:
        """The tenant whose call goes next: the least served for its weight (ties: by
        name, so that the choice is the same every time)."""
        return min(candidates, key=lambda tenant: (self.virtual_time(tenant), tenant))

    def admitted(self, tenant: str, tokens: int, now: float) -> None:
        """A call of ``tenant`` goes: it has been served ``tokens`` more."""
        self._now = max(self._now, now)
        state = self._tenant(tenant)
        state.virtual_time += tokens / self.weight(tenant)
        state.served.add(tokens, now)

    def forget_idle(self, waiting: set[str]) -> None:
        """Tenants with nothing waiting or booked, and no lead over the floor, are as
        good as new: drop them, so that the gate's memory follows its tenants of now."""
        if waiting:
            self._floor = max(
                self._floor, min(self._tenant(tenant).virtual_time for tenant in waiting)
            )
        for tenant in [t for t, s in self._tenants.items() if t not in waiting]:
            state = self._tenants[tenant]
            idle = state.booked <= 0 and state.virtual_time <= self._floor
            if idle and state.returns_at <= self._now and state.released_until <= self._now:
                del self._tenants[tenant]

    def book(
        self,
        tenant: str,
        tokens: int,
        rates: tuple[float, float],
        horizon: float,
        now: float,
        *,
        paced: bool = False,
    ) -> float:
        """Book ``tokens`` for a message of ``tenant`` about to be read, and return 0; or,
        when the tenant already holds more than ``horizon`` seconds of work at its rate,
        book nothing and return the seconds after which the message should come back.

        ``rates`` are the instance's tokens a second (its share of the deployment) and
        the whole deployment's. The tenant's rate is its part of the instance's: what it
        holds here is what its calls wait behind. A message sent back returns at the end
        of its tenant's line (after what intake has released of it), and the returns are
        spaced at the whole deployment's rate: one that comes back too early goes back
        again (two broker operations), one that came back too late would leave the
        deployment idle once the other tenants are done, and the instance's share grows
        with what it holds.

        A tenant holding nothing here books its message, whatever its rate (one call may
        be more than a small share's horizon), unless it owes a turn (``_owes_a_turn``:
        a tenant holding work here stands behind it for their weights, and its own
        messages come here more often than that one's): then the message goes back
        whatever the tenant holds. Two producers' bursts sent straight to the queue
        reach the processors in about equal parts, a batch at a time, and each batch
        ends when its calls are served: only by sending the lighter tenant's excess back
        does a processor read on to the heavier one's.
        """
        self._now = max(self._now, now)
        instance_rate, deployment_rate = rates
        state = self._tenant(tenant)
        if paced:
            state.paced_at = now
        tenant_rate = max(self.tenant_rate(tenant, instance_rate, now), 1e-9)
        state.read.add(tokens, now)
        within = not self._owes_a_turn(tenant, now) and (
            state.booked <= 0 or state.booked + tokens <= tenant_rate * horizon
        )
        if within or not self._contended(tenant, horizon, now):
            state.booked += tokens
            return 0.0
        # Back when what it holds, and what intake released of it here, is down to half the
        # horizon, behind its earlier returns: a message sent back joins the end of its
        # tenant's line, so that returns do not add to what the queue holds of it.
        state.sent_back_at = now
        line = max(now + state.booked / tenant_rate, state.released_until)
        due = max(line - horizon / 2, state.returns_at)
        state.returns_at = due + tokens / max(deployment_rate, 1e-9)
        return max(due - now, 1.0)

    def _finish(self, tenant: str) -> float:
        """Where ``tenant`` stands once what it holds here is served: its virtual time and
        its booked tokens for its weight. Booking by it, as a fair queue orders by
        finishing times, takes a batch's messages in the parts of their tenants' weights
        at once, where what each was served over the last seconds would answer every
        message of one batch alike."""
        state = self._tenant(tenant)
        return state.virtual_time + state.booked / self.weight(tenant)

    def _owes_a_turn(self, tenant: str, now: float) -> bool:
        """Whether another tenant holding work here stands behind ``tenant``
        (``_finish``), while ``tenant``'s messages reach this instance more often than
        the other's, for their weights: then the other's calls are owed the next turns,
        and sending ``tenant``'s message back lets the processor read further, to the
        other's. A tenant read less often than its weight's part (the heavier of two
        producers' bursts that arrive in equal parts) keeps its message: the gate serves
        the other's calls first anyway, and a message sent back goes to the end of the
        queue, behind all the rest."""
        mine = self._finish(tenant)
        read = self._tenant(tenant).read.rate(now) / self.weight(tenant)
        return any(
            other != tenant
            and state.booked > 0
            and self._finish(other) < mine
            and state.read.rate(now) / self.weight(other) < read
            for other, state in self._tenants.items()
        )

    def _contended(self, tenant: str, horizon: float, now: float) -> bool:
        """Another tenant holds work here, or was served here lately, and gets no more
        than its share (none of its messages was sent back lately): only then is a
        message worth sending back. Alone, a tenant's backlog keeps no one waiting; beside
        another backlog, sending both back would only shuffle the queue. Nor does a tenant
        whose burst intake paces beside another paced tenant (``_paced``): the queue
        holds both in their weights' parts already, and sending one back would only hand
        its turns to the other."""
        paced = self._paced(tenant, horizon, now)
        return any(
            other != tenant
            and (state.booked > 0 or state.served.since(now) < SERVED_RATE_SECONDS)
            and now - state.sent_back_at >= SERVED_RATE_SECONDS
            and not (paced and self._paced(other, horizon, now))
            for other, state in self._tenants.items()
        )

    def _scheduled(self, tenant: str, horizon: float, now: float) -> bool:
        """Whether this instance's intake holds scheduled work of ``tenant``: released work
        ahead of it beyond ``horizon``."""
        state = self._tenants.get(tenant)
        return state is not None and state.released_until - now > horizon

    def _paced(self, tenant: str, horizon: float, now: float) -> bool:
        """Whether intake paces ``tenant``: here (``_scheduled``), or in any instance, as a
        message it released said lately (``messaging.PACED``: on Flex Consumption the HTTP
        doors and the queue triggers scale on instances of their own)."""
        state = self._tenants.get(tenant)
        if state is None:
            return False
        return self._scheduled(tenant, horizon, now) or now - state.paced_at < SERVED_RATE_SECONDS

    def release_delay(
        self, tenant: str, tokens: int, rate: float, horizon: float, now: float
    ) -> float:
        """The seconds after which new work of ``tenant`` should reach the queue (0: now),
        so that the queue holds about ``horizon`` seconds of the tenant's work and the
        rest waits in the broker's schedule, released at the tenant's part of ``rate``
        (the deployment's tokens a second): its weight's part among itself and the
        tenants whose scheduled work still waits (``_release_share``). A part set while
        another tenant was busy would hold the deployment idle once that one is gone:
        intake then calls the scheduled messages back and sends them earlier
        (``respace``)."""
        self._now = max(self._now, now)
        state = self._tenant(tenant)
        start = max(now, state.released_until)
        share = self._release_share(tenant, horizon, now)
        state.released_until = start + tokens / max(rate * share, 1e-9)
        return max(0.0, start - now - horizon)

    def _release_share(self, tenant: str, horizon: float, now: float) -> float:
        """``tenant``'s part of the deployment's rate for the work it releases: its
        weight's part among itself and every other tenant with more than ``horizon`` of
        released work ahead, that is work still scheduled in the broker. A trickle, sent
        at once, is no one's contender."""
        contenders = {
            other
            for other in self._tenants
            if other != tenant and self._scheduled(other, horizon, now)
        }
        mine = self.weight(tenant)
        return mine / (mine + sum(self.weight(other) for other in contenders))

    def respace(
        self,
        scheduled: Mapping[str, Sequence[int]],
        rate: float,
        horizon: float,
        now: float,
    ) -> dict[str, list[float]]:
        """New release delays for all the work intake holds scheduled here (each tenant's
        messages' tokens, in their order), now that these tenants are the ones with
        scheduled work: each tenant's at its weight's part of ``rate`` among them, its
        first message as if the queue held ``horizon`` seconds of its work. Called when
        the tenants with scheduled work changed: a part set while another tenant was busy
        would leave the deployment idle once it is gone, and a whole rate set while a
        tenant was alone would take the turns of one that came since. Every other
        tenant's scheduled work is gone: it is no one's contender any more."""
        self._now = max(self._now, now)
        delays: dict[str, list[float]] = {}
        weights = sum(self.weight(tenant) for tenant in scheduled)
        for tenant, works in scheduled.items():
            step = max(rate * self.weight(tenant) / weights, 1e-9)
            offsets = list(itertools.accumulate((tokens / step for tokens in works), initial=0.0))
            delays[tenant] = offsets[:-1]
            self._tenant(tenant).released_until = now + horizon + offsets[-1]
        for tenant, state in self._tenants.items():
            if tenant not in scheduled:
                state.released_until = min(state.released_until, now + horizon)
        return delays

    def release(self, tenant: str, tokens: int) -> None:
        """The booked message ended, however it did."""
        state = self._tenants.get(tenant)
        if state is not None:
            state.booked = max(0.0, state.booked - tokens)

    def tenant_rate(self, tenant: str, rate: float, now: float) -> float:
        """``tenant``'s part of ``rate``: its weight's part among the tenants holding work;
        or, while none of the others had a message sent back lately (about
        ``SERVED_RATE_SECONDS``: they have all they ask for), what they leave of it, if
        that is more. A tenant with messages sent back wants more than it gets: leaving
        it only what it took would hold every split."""
        active = {t for t, s in self._tenants.items() if s.booked > 0} | {tenant}
        weights = sum(self.weight(t) for t in active)
        by_weight = rate * self.weight(tenant) / weights
        others = [t for t in active if t != tenant]
        if any(now - self._tenants[t].sent_back_at < SERVED_RATE_SECONDS for t in others):
            return by_weight
        return max(by_weight, rate - sum(self.served_rate(t, now) for t in others))

    def served_rate(self, tenant: str, now: float) -> float:
        """The tokens a second ``tenant`` was served lately."""
        state = self._tenants.get(tenant)
        return 0.0 if state is None else state.served.rate(now)
