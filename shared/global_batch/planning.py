"""Planning: which staged requests go out now, and in which files.

A tenant's staged requests for one deployment are due once ``GlobalBatch__submitAtLines``
of them wait, or once the oldest has waited ``GlobalBatch__submitAfterSeconds`` (the
service asks for large files rather than many small ones). Due requests are packed, oldest
first, into files within the service's limits (``files.pack``): one submission per file,
for one tenant, so every batch is attributable whole, and, with
``GlobalBatch__enqueuedTokens``, within the deployment's enqueued-token quota
(``quota``: a file estimated above it would be refused for ever).

A planned submission's input file and its members' facts are written before the
submission itself: an open submission always has them, and uploading and concluding read
one blob each instead of every staged line again.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from shared.clock import Clock, utc_now
from shared.global_batch.files import input_file, pack
from shared.global_batch.quota import line_tokens
from shared.global_batch.records import PendingRequest, Submission
from shared.global_batch.store import BatchRecords
from shared.request_ids import new_request_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PlanningPolicy:
    max_lines_per_file: int
    max_bytes_per_file: int
    submit_at_lines: int
    submit_after: timedelta
    # The deployments' enqueued-token quota (GlobalBatch__enqueuedTokens): files are split
    # so that none is estimated above it. None: split by lines and bytes only.
    enqueued_tokens: int | None = None


class Planner:
    def __init__(
        self, records: BatchRecords, policy: PlanningPolicy, clock: Clock = utc_now
    ) -> None:
        self._records = records
        self._policy = policy
        self._clock = clock

    def plan(self, busy: set[str], in_time: Callable[[], bool]) -> list[str]:
        """Open submissions for the staged requests that are due and not members of an
        open submission (``busy``); the new submissions' ids. Stops between groups once
        ``in_time`` says the run's time is up."""
        now = self._clock()
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        oldest: dict[tuple[str, str], datetime] = {}
        for waiting in self._records.waiting():
            if waiting.request_id in busy:
                continue
            key = (waiting.deployment, waiting.tenant_id)
            groups[key].append(waiting.request_id)
            if key not in oldest or waiting.staged_at < oldest[key]:
                oldest[key] = waiting.staged_at
        opened: list[str] = []
        for (deployment, tenant_id), request_ids in sorted(groups.items()):
            if not in_time():
                break
            due = len(request_ids) >= self._policy.submit_at_lines
            if not due and now - oldest[(deployment, tenant_id)] < self._policy.submit_after:
                continue
            staged = self._records.pending_many(deployment, tenant_id, request_ids)
            files = pack(
                list(staged.values()),
                self._policy.max_lines_per_file,
                self._policy.max_bytes_per_file,
                self._policy.enqueued_tokens,
            )
            opened.extend(self._open(members, now) for members in files)
        return opened

    def _open(self, members: list[PendingRequest], now: datetime) -> str:
        content = input_file(members)
        first = members[0]
        deadlines = [p.request.deadline for p in members if p.request.deadline is not None]
        submission = Submission(
            id=new_request_id(self._clock),
            tenant_id=first.tenant_id,
            deployment=first.deployment,
            model=first.request.model,
            requests=len(members),
            bytes=len(content),
            estimated_tokens=sum(line_tokens(pending.line) for pending in members),
            deadline=min(deadlines, default=None),
            created_at=now,
            updated_at=now,
        )
        self._records.keep_file(submission.id, "input", content)
        self._records.keep_members(submission.id, (pending.facts() for pending in members))
        self._records.open(submission)
        log.info(
            "planned submission %s: %d requests of tenant %s for %s (%d bytes, about %d "
            "tokens)",
            submission.id, len(members), submission.tenant_id, submission.deployment,
            submission.bytes, submission.estimated_tokens,
        )  # fmt: skip
        return submission.id
