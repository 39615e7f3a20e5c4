"""A tenant's jobs, newest first, a page at a time, for a cost that follows the page.

Jobs are stored as ``<tenant>/<request id>.json`` (``job_index.job_name``) and Blob
storage lists names in ascending order only, with no way to start from the end. What
makes newest-first cheap anyway is the id: every id the service mints is a UUID version
7 (``request_ids``), whose first 13 characters (``xxxxxxxx-xxxx``) are its minting time
in milliseconds, in hex, so name order is time order. The newest names below a bound are
found by walking that prefix tree from the top down (``_NewestFirst``): list a prefix a
page at a time; when it holds no more than a page, its names are the answer, newest
first; when it holds more, walk its children (the next character, ``f`` down to ``0``),
skipping those wholly at or above the bound. A page therefore costs its jobs' reads
plus about one listing per level of the tree (13 at most) and one per neighbouring
prefix it visits, whatever number of jobs the tenant keeps.

Ids that carry no time (a Service Bus producer's own ids: the producer library's UUID
version 5, or any string) sort where their characters put them, unrelated to when they
came. They are listed after every timed one (``Phase.UNTIMED``) by one pass over the
tenant's names in name order, 5,000 names per call: that last phase costs what the tenant
keeps, and only a caller who pages to the end pays it.

A page stops at ``limit`` jobs or at its budget of storage calls, whichever comes first,
and says where the next one starts (``Position``); a filtered page may therefore be
short, even empty, while a next one exists. The first page fixes a horizon (a second
past the clock) that the timed phase stays below; a request made while a caller pages
through the listing is above it, and comes at the end, with the untimed ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from enum import StrEnum

from shared.clock import Clock, utc_now
from shared.contracts import Job
from shared.documents import NamePage, PagedListing
from shared.job_index import job_name
from shared.jobs import JobStore

# A minted id: lower-case hex, version 7, the RFC 9562 variant (``request_ids``).
TIMED_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
# The id's characters that hold its minting time (48 bits of milliseconds, and a dash):
# the walk descends at most this deep; below it one millisecond is listed whole.
TIME_CHARACTERS = 13
HEX_DESCENDING = "fedcba9876543210"
SUFFIX = ".json"
# Blob storage's largest page: the untimed pass reads the tenant's names this many a call.
SCAN_PAGE = 5_000
# A prefix holding no more names than this is listed whole, in one call: the walk only
# descends where a tenant is busy (a listing's size, not its count, grows with it).
PROBE_NAMES = 250
# How far past its clock a listing starts: each empty step of time above the newest job
# can cost a call, so it stays short. An id minted later, or on a clock further ahead,
# is not lost: it is at or above the horizon, so the untimed phase lists it.
HORIZON_LEAD = timedelta(seconds=1)


class Phase(StrEnum):
    TIMED = "timed"
    UNTIMED = "untimed"


@dataclass(frozen=True)
class Position:
    """Where a listing stands: ``horizon`` and ``bound`` are id prefixes (timed ids below
    ``bound`` are still to come; ``horizon``, fixed by the first page, divides timed ids
    from the rest); in the untimed phase ``marker`` is the store's page marker and
    ``after`` the last id given from that page."""

    horizon: str
    bound: str
    phase: Phase = Phase.TIMED
    marker: str | None = None
    after: str | None = None


@dataclass(frozen=True)
class JobPage:
    """One page: its jobs, newest first, and where the next page starts (None: the end)."""

    jobs: tuple[Job, ...]
    next: Position | None


def time_prefix(millis: int) -> str:
    """The first ``TIME_CHARACTERS`` characters of a version 7 id minted at ``millis``."""
    digits = f"{millis & ((1 << 48) - 1):012x}"
    return f"{digits[:8]}-{digits[8:]}"


def is_timed(job_id: str, horizon: str) -> bool:
    """Whether the timed phase lists ``job_id``: a minted id, below the horizon."""
    return TIMED_ID.fullmatch(job_id) is not None and job_id < horizon


def _children(prefix: str) -> str:
    """The characters that may follow ``prefix`` in a timed id, last in name order first."""
    return "-" if len(prefix) == 8 else HEX_DESCENDING


@dataclass
class _Budget:
    """Storage calls a page may still make."""

    calls: int

    def spend(self) -> bool:
        if self.calls <= 0:
            return False
        self.calls -= 1
        return True


class _NewestFirst:
    """The timed ids below ``bound``, newest first, by walking the prefix tree.

    ``bound`` moves down as ids are given (to the last one) and as subtrees are done (to
    the subtree's prefix: every timed id left is below it), so a page that ends early
    still says where to resume. ``exhausted``: the budget ran out before the walk ended.
    """

    def __init__(
        self, pages: PagedListing, container: str, tenant_id: str, horizon: str, bound: str
    ) -> None:
        self._pages = pages
        self._container = container
        self._root = f"{tenant_id}/"
        self._horizon = horizon
        self.bound = bound
        self.exhausted = False

    def ids(self, probe: int, budget: _Budget) -> Iterator[str]:
        yield from self._subtree("", probe, budget)

    def _subtree(self, prefix: str, probe: int, budget: _Budget) -> Iterator[str]:
        page = self._list(prefix, probe, None, budget)
        if page is None:
            return
        if page.marker is not None and len(prefix) < TIME_CHARACTERS:
            for character in _children(prefix):
                child = prefix + character
                if child > self.bound[: len(child)]:
                    continue  # every id under it is at or above the bound
                yield from self._subtree(child, probe, budget)
                if self.exhausted:
                    return
                self.bound = min(self.bound, child)
            return
        names = list(page.names)
        while page.marker is not None:  # one millisecond holding more than a page
            more = self._list(prefix, SCAN_PAGE, page.marker, budget)
            if more is None:
                return
            names.extend(more.names)
            page = more
        for job_id in sorted(self._timed(names), reverse=True):
            self.bound = job_id
            yield job_id

    def _timed(self, names: list[str]) -> Iterator[str]:
        for name in names:
            job_id = name.removeprefix(self._root).removesuffix(SUFFIX)
            if name.endswith(SUFFIX) and is_timed(job_id, self._horizon) and job_id < self.bound:
                yield job_id

    def _list(
        self, prefix: str, limit: int, marker: str | None, budget: _Budget
    ) -> NamePage | None:
        if not budget.spend():
            self.exhausted = True
            return None
        return self._pages.list_page(self._container, self._root + prefix, limit, marker)


class JobListing:
    """Pages of one tenant's jobs, newest first, each job kept or skipped by ``accept``.

    A page makes about ``limit`` plus ``extra_calls`` storage calls (listings and job
    reads together), so a filter that rejects most jobs cannot make one request read
    them all: the page ends short and says where to go on.
    """

    def __init__(
        self,
        pages: PagedListing,
        store: JobStore,
        container: str,
        clock: Clock = utc_now,
        extra_calls: int = 64,
    ) -> None:
        self._pages = pages
        self._store = store
        self._container = container
        self._clock = clock
        self._extra_calls = extra_calls

    def start(self) -> Position:
        """The position of a new listing: the timed phase below now (and a second)."""
        horizon = time_prefix(int((self._clock() + HORIZON_LEAD).timestamp() * 1000))
        return Position(horizon=horizon, bound=horizon)

    def page(
        self, tenant_id: str, position: Position, limit: int, accept: Callable[[Job], bool]
    ) -> JobPage:
        budget = _Budget(limit + self._extra_calls)
        found: list[Job] = []
        if position.phase is Phase.TIMED:
            walk = _NewestFirst(
                self._pages, self._container, tenant_id, position.horizon, position.bound
            )
            for job_id in walk.ids(max(limit + 1, PROBE_NAMES), budget):
                self._read(tenant_id, job_id, accept, found, budget)
                if len(found) == limit or budget.calls <= 0:
                    return JobPage(tuple(found), replace(position, bound=walk.bound))
            if walk.exhausted:
                return JobPage(tuple(found), replace(position, bound=walk.bound))
            position = replace(position, phase=Phase.UNTIMED, bound="")
        return self._untimed(tenant_id, position, limit, accept, found, budget)

    def _untimed(
        self,
        tenant_id: str,
        position: Position,
        limit: int,
        accept: Callable[[Job], bool],
        found: list[Job],
        budget: _Budget,
    ) -> JobPage:
        """The rest, in name order: one pass over the tenant's names."""
        root = job_name(tenant_id, "").removesuffix(SUFFIX)
        while budget.spend():
            page = self._pages.list_page(self._container, root, SCAN_PAGE, position.marker)
            for name in page.names:
                job_id = name.removeprefix(root).removesuffix(SUFFIX)
                if not self._untimed_name(name, job_id, position):
                    continue
                self._read(tenant_id, job_id, accept, found, budget)
                position = replace(position, after=job_id)
                if len(found) == limit or budget.calls <= 0:
                    return JobPage(tuple(found), position)
            if page.marker is None:
                return JobPage(tuple(found), None)
            position = replace(position, marker=page.marker, after=None)
        return JobPage(tuple(found), position)

    @staticmethod
    def _untimed_name(name: str, job_id: str, position: Position) -> bool:
        if not name.endswith(SUFFIX) or not job_id or "/" in job_id:
            return False
        if position.after is not None and job_id <= position.after:
            return False
        return not is_timed(job_id, position.horizon)

    def _read(
        self,
        tenant_id: str,
        job_id: str,
        accept: Callable[[Job], bool],
        found: list[Job],
        budget: _Budget,
    ) -> None:
        budget.spend()
        stored = self._store.load(tenant_id, job_id)
        if stored is not None and accept(stored.job):
            found.append(stored.job)
