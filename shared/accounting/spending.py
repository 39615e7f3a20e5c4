"""Each tenant's spending, kept in storage: budgets reserved at the door, answers counted.

A tenant's month is one JSON document (``shared.accounting.ledger.MonthLedger``), named
``<tenant>/<YYYY-MM>.json`` in the usage container, and changed only by compare-and-swap
(If-Match its ETag), so every instance of the app sees one counter:

- **At the door** (``reserve``), for a tenant with a budget only: the request's
  estimate is checked against the budgets and held in the same write. Writes to one
  document are serial, so requests admitted at the same moment on any number of
  instances cannot overspend a budget together; what a budget can be passed by is the
  difference between the estimates held and what the answers then use (an estimate
  counts the longest answer a request allows, so usually none). ``BudgetExceeded``
  names the budget, its period and when it resets; nothing is written then.
- **After the answer is kept** (``record``), for every tenant: the answer's tokens and
  cost join its day's row, and its reservation is released. Answers are gathered in
  memory and written together (``flush``, every few seconds and when the process stops):
  one write per tenant and month per flush instead of one per request, which keeps a
  request within its budget of storage operations. Answers not yet written still hold
  their reservation in storage, so a budget never counts less than was spent; an
  instance that stops without flushing leaves at most those seconds of answers counted
  at their estimates (the jobs keep every answer: ``ops usage --from-jobs`` sums them).

Each document is cached with its ETag after every read and write, so a reservation costs
one write while this instance wrote the document last, and one read more when another
did. Nothing here imports an SDK: the documents port is ``shared.documents.JsonDocuments``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from shared import telemetry
from shared.accounting.ledger import (
    Answer,
    MonthLedger,
    Reservation,
    Spend,
    budget_uses,
    first_exceeded,
    month_of,
)
from shared.accounting.tenants import Budget, TenantCatalog
from shared.clock import Clock, utc_now
from shared.documents import JsonDocuments
from shared.errors import BudgetExceeded, ConcurrencyConflict, InferbusError
from shared.periodic import run_every

log = logging.getLogger(__name__)

# Writes lost to another instance: each loss means another one progressed, so a writer
# keeps racing until it has waited ``RACE_PATIENCE_SECONDS`` in all between its tries, then
# gives up (the change is retried at the next flush, or the door answers 503). After a
# loss it waits a random part of a doubling step (``RACE_STEP_SECONDS``, at most
# ``RACE_STEP_CEILING``) before it reads again, so that instances writing one tenant's
# month at once spread out instead of colliding again in step (measured against Azurite:
# 4 instances reserving at once lost 8 races in a row without it). Patience is counted in
# waited seconds, not in tries: a fixed count of 12 was used up by one unlucky writer
# among four on a slow machine while the others kept winning.
RACE_STEP_SECONDS: Final = 0.005
RACE_STEP_CEILING: Final = 0.2
RACE_PATIENCE_SECONDS: Final = 5.0
MAX_RACES: Final = 100  # a bound even when the waits drawn are all near zero

# How long a request without a deadline (a Global Batch request) holds its reservation:
# the service's 24-hour window, with a day's margin for staging and copying out.
UNANSWERED_BATCH_SECONDS: Final = 2 * 24 * 3600

Change = Callable[[MonthLedger], None]


@dataclass(frozen=True)
class _Key:
    tenant: str
    month: str

    @property
    def name(self) -> str:
        return f"{self.tenant}/{self.month}.json"


class TenantSpending:
    """The tenants' month documents (see the module doc), shared by the doors and the
    processors of one instance."""

    def __init__(
        self,
        documents: JsonDocuments,
        container: str,
        tenants: TenantCatalog,
        clock: Clock = utc_now,
        sleep: Callable[[float], None] = time.sleep,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self._documents = documents
        self._sleep = sleep
        self._uniform = uniform
        self._container = container
        self._tenants = tenants
        self._clock = clock
        self._cache: dict[_Key, tuple[MonthLedger, str]] = {}
        self._pending: dict[_Key, list[Change]] = {}
        self._locks: dict[_Key, threading.Lock] = {}
        self._guard = threading.Lock()
        self._flushing = False

    # --- the door ---------------------------------------------------------------------

    def has_budget(self, tenant: str) -> bool:
        return self.budget_of(tenant) is not None

    def budget_of(self, tenant: str) -> Budget | None:
        """``tenant``'s budget in the tenant catalog (None: it has none)."""
        return self._tenants.policy(tenant).budget

    def reserve(self, tenant: str, request_id: str, estimate: Spend, until: datetime) -> None:
        """Hold ``estimate`` for ``request_id`` against ``tenant``'s budgets until its
        answer is counted (or ``until``, when it can no longer run); BudgetExceeded when
        a budget would be passed. A tenant without a budget costs nothing here; a
        request held already stays held (admitted work always runs)."""
        budget = self._tenants.policy(tenant).budget
        if budget is None:
            return
        now = self._clock()

        def hold(ledger: MonthLedger) -> None:
            if request_id in ledger.reserved:  # held already (a message met twice)
                return
            exceeded = first_exceeded(budget, ledger, estimate, now)
            if exceeded is not None:
                raise BudgetExceeded(
                    f"tenant '{tenant}': {exceeded.describe()}",
                    budget=exceeded.budget,
                    period=exceeded.period,
                    limit=exceeded.limit,
                    spent=exceeded.spent,
                    resets_at=exceeded.resets_at.isoformat(),
                    retry_after=max((exceeded.resets_at - now).total_seconds(), 1.0),
                )
            ledger.reserve(
                request_id, Reservation(day=now.date(), tokens=estimate.tokens,
                                        cost=estimate.cost, until=until),
            )  # fmt: skip

        ledger = self._write(_Key(tenant, month_of(now)), hold)
        for use in budget_uses(budget, ledger, now):
            telemetry.record_budget_use(
                tenant=tenant, budget=use.budget, period=use.period,
                used=use.spent, limit=use.limit,
            )  # fmt: skip

    def release(self, tenant: str, request_id: str, reserved_at: datetime) -> None:
        """Give back what ``request_id`` holds (its message could not be sent, or it
        ended without an answer): at the next flush."""
        if self.has_budget(tenant):
            self._later(
                _Key(tenant, month_of(reserved_at)), lambda ledger: _drop(ledger, request_id)
            )

    # --- the processors ---------------------------------------------------------------

    def record(self, tenant: str, created_at: datetime, answer: Answer) -> None:
        """Count a kept answer (at the next flush), releasing the reservation its request
        made when it was accepted (``created_at``: in that month's document)."""
        answered = _Key(tenant, month_of(answer.day))
        reserved = _Key(tenant, month_of(created_at))
        if reserved != answered and self.has_budget(tenant):
            self._later(reserved, lambda ledger: _drop(ledger, answer.request_id))
        self._later(answered, lambda ledger: ledger.add_answer(answer))

    def flush(self) -> int:
        """Write every gathered change; the documents written. A document that cannot be
        written now keeps its changes for the next flush."""
        with self._guard:
            keys = [key for key, changes in self._pending.items() if changes]
        written = 0
        for key in keys:
            try:
                self._write(key, lambda ledger: None)
                written += 1
            except InferbusError as error:
                log.warning("usage of %s not written yet, kept for the next flush: %s",
                            key.name, error)  # fmt: skip
        return written

    def start_flushing(self, every_seconds: float) -> None:
        """Flush every ``every_seconds`` in a thread of its own, and once more when the
        process exits (the app starts it with its services); idempotent. A flush that
        fails keeps its changes for the next one."""
        with self._guard:
            if self._flushing:
                return
            self._flushing = True
        run_every(self, every_seconds, TenantSpending.flush, name="usage-ledger", at_exit=True)

    def pending(self) -> int:
        """Changes gathered and not written yet."""
        with self._guard:
            return sum(len(changes) for changes in self._pending.values())

    # --- reading ----------------------------------------------------------------------

    def month(self, tenant: str, month: str) -> MonthLedger:
        """``tenant``'s ``month`` as stored (an empty one when nothing was counted)."""
        loaded = self._load(_Key(tenant, month))
        return loaded[0] if loaded is not None else MonthLedger(tenant=tenant, month=month)

    # --- storage ----------------------------------------------------------------------

    def _later(self, key: _Key, change: Change) -> None:
        with self._guard:
            self._pending.setdefault(key, []).append(change)

    def _lock(self, key: _Key) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())

    def _write(self, key: _Key, change: Change) -> MonthLedger:
        """Apply the gathered changes and ``change`` to ``key``'s document and write it
        (If-Match; re-read after a lost race); the document as written. An exception
        ``change`` raises writes nothing and keeps the gathered changes; a refusal read
        from the cache is checked again on a fresh read first."""
        with self._lock(key):
            waited, tries = 0.0, 0
            for race in range(MAX_RACES):
                if race:
                    if waited >= RACE_PATIENCE_SECONDS:
                        break
                    step = min(RACE_STEP_SECONDS * 2 ** min(race, 10), RACE_STEP_CEILING)
                    pause = self._uniform(0, step)
                    self._sleep(pause)
                    waited += pause
                tries = race + 1
                fresh = key not in self._cache
                cached = self._cache.get(key) or self._load(key)
                with self._guard:
                    gathered = list(self._pending.get(key, ()))
                ledger = (
                    cached[0].model_copy(deep=True)
                    if cached is not None
                    else MonthLedger(tenant=key.tenant, month=key.month)
                )
                ledger.lapse(self._clock())  # before a budget is checked against it
                for earlier in gathered:
                    earlier(ledger)
                try:
                    change(ledger)
                except BudgetExceeded:
                    if fresh:
                        raise
                    self._cache.pop(key, None)  # another instance may have freed some
                    continue
                document = ledger.model_dump(mode="json", by_alias=True)
                try:
                    if cached is None:
                        etag = self._documents.create(self._container, key.name, document)
                        if etag is None:
                            raise ConcurrencyConflict(f"{key.name} was created meanwhile")
                    else:
                        etag = self._documents.replace(
                            self._container, key.name, document, cached[1]
                        )
                except ConcurrencyConflict:
                    self._cache.pop(key, None)
                    continue
                self._cache[key] = (ledger, etag)
                with self._guard:
                    del self._pending.get(key, [])[: len(gathered)]
                return ledger
            raise ConcurrencyConflict(
                f"{key.name}: lost {tries} writes in a row, waiting {waited:.1f} s between"
            )

    def _load(self, key: _Key) -> tuple[MonthLedger, str] | None:
        loaded = self._documents.load(self._container, key.name)
        if loaded is None:
            return None
        document, etag = loaded
        ledger = MonthLedger.model_validate(document)
        self._cache[key] = (ledger, etag)
        return ledger, etag


def _drop(ledger: MonthLedger, request_id: str) -> None:
    ledger.release(request_id)
