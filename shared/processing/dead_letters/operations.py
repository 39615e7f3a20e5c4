"""Service Bus dead-letter queues of the request queues: replay and purge.

What a dead-letter sub-queue holds (``DeadLetteredMessage``) and the port over it
(``DeadLetterQueues``) live in ``queues``; choosing and summarising
in ``filters``; redaction in ``shared.redaction``. This module holds what
writes: the replay, with its markers and job reopening, and the purge. Reading is peek
only.

Replay sends a corrected copy to the queue the message came from: the same body, a new
message id ``<original>:replay:<n>`` (the queue's duplicate detection would drop the
original id) with ``replay_of=<dead-lettered message id>``, ``retry_count`` reset to 0,
the same session id. The processor keys the job by the body's request id, so a job the
dead-lettering marked failed or expired is reopened first (compare-and-swap); a completed
or cancelled job is skipped, a request past its deadline refused, unless the operator
extends it (``--extend-deadline``, ``deadlines``): then the copy's body and time
to live, and the job, carry the new deadline, and each extension is logged. A marker per
dead-lettered message (``<LedgerContainer>/sb-replays/<queue>/<sequence>.json``) is
created "sending" before the send and set "sent" after it: a second run skips what was
sent and resumes what a crash or a broker outage interrupted (the copy's id is the same,
so within the queue's duplicate-detection window the broker drops a copy that did go
out). A marker names its message's id and enqueued time, because sequence numbers start
again in a recreated queue. The dead-lettered message stays where it is for inspection
until it is purged.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from shared.clock import Clock, utc_now
from shared.contracts import Job, JobStatus, RequestMessage
from shared.documents import Document, JsonDocuments
from shared.errors import Conflict, InvalidPayload, NotFound
from shared.jobs import REOPENABLE, JobRepository, Versioned, reopen
from shared.messaging import MessageSender, OutgoingMessage
from shared.processing.adopted_jobs import INVALID_REQUEST
from shared.processing.dead_letters.deadlines import DeadlineExtension, NewDeadline
from shared.processing.dead_letters.queues import DEAD_LETTER_PROPERTIES, topic_subscription
from shared.processing.dead_letters.subscriptions import result_copy
from shared.processing.inbound import (
    FAIR_SHARE_WAITS,
    OUTAGE_RETRY_COUNT,
    OUTAGE_SINCE,
    InboundMessage,
)
from shared.processing.ports import DeadLetterQueues
from shared.processing.request_parsing import parse_request
from shared.processing.values import DeadLetteredMessage
from shared.redaction import mask_credentials

log = logging.getLogger(__name__)

MARKER_PREFIX = "sb-replays/"
# The settlement of a job a replay reopened (``... of <queue>``).
REPLAYED_SETTLEMENT = "replayed from the dead-letter queue"


# --- replay ------------------------------------------------------------------------------------

_REPLAY_SUFFIX = re.compile(r":(?:replay|retry):.*$")
_REPLAY_NUMBER = re.compile(r":replay:(\d+)")


def replay_generation(message_id: str | None) -> int:
    """0 for an original or a retry copy, n for the n-th replay (and its retry copies)."""
    return max((int(n) for n in _REPLAY_NUMBER.findall(message_id or "")), default=0)


def replay_message_id(original: str) -> str:
    """``R`` -> ``R:replay:1``; ``R:replay:1:retry:2`` (a retry of a replay) -> ``R:replay:2``."""
    return f"{_REPLAY_SUFFIX.sub('', original)}:replay:{replay_generation(original) + 1}"


def with_deadline(body: bytes, deadline: datetime) -> bytes:
    """A request body whose ``deadline`` is ``deadline`` (the processor reads the body's
    deadline before the job's); every other field as it was."""
    document = json.loads(body)
    document["deadline"] = deadline.isoformat()
    return json.dumps(document, ensure_ascii=False).encode()


def replay_copy(
    item: DeadLetteredMessage,
    request: RequestMessage,
    now: datetime,
    new_deadline: datetime | None = None,
) -> OutgoingMessage:
    """The corrected copy of ``item``; ``new_deadline``: the one an extension gave it."""
    original = item.message_id or request.request_id
    properties = {
        k: v
        for k, v in item.application_properties.items()
        if v is not None and k not in DEAD_LETTER_PROPERTIES
    }
    for counter in (OUTAGE_RETRY_COUNT, OUTAGE_SINCE, FAIR_SHARE_WAITS):  # a replay starts afresh
        properties.pop(counter, None)
    properties.update(retry_count=0, replay_of=original)
    deadline = new_deadline or request.deadline
    return OutgoingMessage(
        body=with_deadline(item.body, new_deadline) if new_deadline else item.body,
        message_id=replay_message_id(original),
        correlation_id=item.correlation_id or request.request_id,
        content_type=item.content_type or "application/json",
        subject=item.subject,
        session_id=item.session_id or request.document_id,
        time_to_live=max(deadline - now, timedelta(seconds=1)) if deadline else None,
        application_properties=properties,
    )


Status = Literal["replay", "already-replayed", "skipped", "refused"]


@dataclass(frozen=True)
class ReplayOutcome:
    item: DeadLetteredMessage
    status: Status  # "replay": replayed (or, in a dry run, would be)
    detail: str
    replay_message_id: str | None = None


@dataclass(frozen=True)
class _Plan:
    outcome: ReplayOutcome
    request: RequestMessage | None = None
    job: Versioned | None = None
    marker: Document | None = None
    deadline: NewDeadline | None = None  # what --extend-deadline made of it


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def _belongs(marker: Document, item: DeadLetteredMessage) -> bool:
    """Whether a marker is ``item``'s (sequence numbers restart with a recreated queue)."""
    same_message = marker.get("message_id") == item.message_id
    return same_message and marker.get("enqueued_time") == _iso(item.enqueued_time)


def _resumed_deadline(marker: Document | None, old: datetime | None) -> NewDeadline | None:
    """The deadline an interrupted replay gave its copy (in its "sending" marker), so
    that resuming it sends the same copy even without ``--extend-deadline``."""
    given = marker.get("deadline_extended_to") if marker else None
    if not isinstance(given, str):
        return None
    new = datetime.fromisoformat(given)
    return None if old is not None and old >= new else NewDeadline(old, new, False, False)


def _extended(job: Job, deadline: datetime, clock: Clock) -> Job:
    return job.model_copy(update={"deadline": deadline, "updated_at": clock()})


def replay_marker_name(item: DeadLetteredMessage) -> str:
    return f"{MARKER_PREFIX}{item.queue}/{item.sequence_number}.json"


def replay_marker(
    documents: JsonDocuments, container: str, item: DeadLetteredMessage
) -> Document | None:
    """The replay marker of ``item`` (``status`` sending or sent), or None."""
    found = documents.load(container, replay_marker_name(item))
    return found[0] if found and _belongs(found[0], item) else None


class DeadLetterOperations:
    """List, show, replay and purge over ``DeadLetterQueues`` and a sender per queue."""

    def __init__(
        self,
        queues: DeadLetterQueues,
        sender_for: Callable[[str], MessageSender],
        jobs: JobRepository,
        documents: JsonDocuments,
        marker_container: str,
        aliases: tuple[str, ...],  # the models served here
        clock: Clock = utc_now,
    ) -> None:
        self._queues = queues
        self._sender_for = sender_for
        self._jobs = jobs
        self._documents = documents
        self._markers = marker_container
        self._aliases = aliases
        self.clock = clock

    def messages(self, queues: Iterable[str]) -> list[DeadLetteredMessage]:
        return [item for queue in queues for item in self._queues.peek(queue)]

    def marker(self, item: DeadLetteredMessage) -> Document | None:
        """The replay marker of ``item`` (``status`` sending or sent), or None."""
        return replay_marker(self._documents, self._markers, item)

    def _claim(self, name: str, marker: Document, item: DeadLetteredMessage) -> bool:
        """Create ``item``'s marker; False when one exists (another run made it)."""
        if self._documents.create(self._markers, name, marker) is not None:
            return True
        found = self._documents.load(self._markers, name)
        if found is None or _belongs(found[0], item):
            return False
        # The marker of an earlier message with this sequence number: the queue was
        # recreated (or, locally, the emulator restarted while storage kept its blobs).
        self._documents.replace(self._markers, name, marker, found[1])
        return True

    def markers(self, items: list[DeadLetteredMessage]) -> dict[tuple[str, int], Document]:
        """The markers of ``items``: one listing per queue, one read per marked message."""
        marked: dict[tuple[str, int], Document] = {}
        for queue in {i.queue for i in items}:
            names = set(self._documents.list_names(self._markers, f"{MARKER_PREFIX}{queue}/"))
            for item in (i for i in items if i.queue == queue):
                if replay_marker_name(item) in names and (document := self.marker(item)):
                    marked[(queue, item.sequence_number)] = document
        return marked

    def plan(
        self, item: DeadLetteredMessage, extension: DeadlineExtension | None = None
    ) -> ReplayOutcome:
        """What ``replay`` would do with ``item`` (reads only)."""
        return self._plan(item, extension).outcome

    def _plan(self, item: DeadLetteredMessage, extension: DeadlineExtension | None) -> _Plan:
        marker = self.marker(item)
        if marker and marker.get("status") == "sent":
            sent_as = str(marker.get("replay_message_id"))
            return _Plan(ReplayOutcome(item, "already-replayed", f"as {sent_as}", sent_as))
        subscription = topic_subscription(item.queue)
        if subscription is not None:  # a results message: no request, no job
            copy_id = replay_message_id(item.message_id or f"{item.queue}#{item.sequence_number}")
            detail = f"as {copy_id} to {subscription[0]} for subscription {subscription[1]}"
            return _Plan(ReplayOutcome(item, "replay", detail, copy_id), marker=marker)
        inbound = InboundMessage(item.body, item.message_id, item.sequence_number, 0, None)
        try:
            request = parse_request(inbound, self._aliases)
        except InvalidPayload as error:
            why = f"not a request the processor accepts ({error}); fix it and submit it anew"
            return _Plan(ReplayOutcome(item, "refused", mask_credentials(why, 300)))
        job = self._jobs.load(request.tenant_id, request.request_id)
        if job is not None and job.job.status in (JobStatus.COMPLETED, JobStatus.CANCELLED):
            return _Plan(ReplayOutcome(item, "skipped", f"job {job.job.status.value}"))
        if job is not None and job.job.error and job.job.error.code == INVALID_REQUEST:
            # The processor refused it for breaking a door's rule (a direct producer's
            # message): a copy would run it unchecked, since its job now exists.
            why = f"it breaks a rule ({job.job.error.message}); fix it and submit it anew"
            return _Plan(ReplayOutcome(item, "refused", mask_credentials(why, 300)))
        now = self.clock()
        deadline = request.deadline or (job.job.deadline if job else None)
        new = _resumed_deadline(marker, deadline)
        if new is None and extension is not None and deadline is not None:
            applied = extension.apply(deadline, now)
            new = None if applied.kept else applied
        if deadline is not None and deadline <= now and new is None:
            why = (
                f"deadline passed at {deadline.isoformat()}; submit a new request "
                "(or replay it with --extend-deadline DURATION)"
            )
            return _Plan(ReplayOutcome(item, "refused", why))
        copy_id = replay_message_id(item.message_id or request.request_id)
        state = f"job {job.job.status.value}" if job else "no job yet"
        if job is not None and job.job.status in REOPENABLE:
            state += ", reopened"
        detail = f"as {copy_id} to {item.queue} ({state})"
        if new is not None:
            detail += "; " + new.describe(extension.cap if extension else timedelta())
        outcome = ReplayOutcome(item, "replay", detail, copy_id)
        return _Plan(outcome, request, job, marker, new)

    def replay(
        self,
        items: list[DeadLetteredMessage],
        progress: Callable[[int, int, ReplayOutcome], None] = lambda *_: None,
        extension: DeadlineExtension | None = None,
    ) -> list[ReplayOutcome]:
        """Replay ``items`` in order, with new deadlines when ``extension`` is given; a
        broker or storage outage raises TransientError (the markers let the same command
        continue where it stopped)."""
        outcomes = []
        for position, item in enumerate(items, start=1):
            outcome = self._replay_one(self._plan(item, extension), extension)
            outcomes.append(outcome)
            progress(position, len(items), outcome)
        return outcomes

    def _replay_one(self, plan: _Plan, extension: DeadlineExtension | None) -> ReplayOutcome:
        outcome, request, new = plan.outcome, plan.request, plan.deadline
        if outcome.status == "replay" and topic_subscription(outcome.item.queue) is not None:
            return self._replay_result(plan)
        if outcome.status != "replay" or request is None or outcome.replay_message_id is None:
            return outcome
        item, now = outcome.item, self.clock()
        name = replay_marker_name(item)
        marker: Document = plan.marker or {
            **_sending_marker(item, outcome.replay_message_id, now),
            "request_id": request.request_id,
            "tenant_id": request.tenant_id,
            **(
                {"deadline_extended_from": _iso(new.old), "deadline_extended_to": _iso(new.new)}
                if new is not None
                else {}
            ),
        }
        if plan.marker is None and not self._claim(name, marker, item):
            return self._replay_one(self._plan(item, extension), extension)  # another run won
        if plan.job is not None and (plan.job.job.status in REOPENABLE or new is not None):
            ended = self._update_job(plan.job, item, request, new)
            if ended is not None:
                if plan.marker is None:
                    self._documents.delete(self._markers, name)
                return ReplayOutcome(item, "skipped", f"job {ended.value} meanwhile")
        if new is not None:
            log.warning(
                "replaying %s (request %s): deadline extended from %s to %s%s",
                item.message_id,
                request.request_id,
                _iso(new.old),
                new.new.isoformat(),
                " (capped by MaxDeadlineSeconds)" if new.capped else "",
            )
        copy = replay_copy(item, request, now, new.new if new else None)
        self._sender_for(item.queue).send(copy)
        self._documents.put(
            self._markers, name, {**marker, "status": "sent", "sent_at": self.clock().isoformat()}
        )
        return outcome

    def _replay_result(self, plan: _Plan) -> ReplayOutcome:
        """Send a results message again to its topic (``subscriptions``)."""
        outcome, item = plan.outcome, plan.outcome.item
        copy_id = outcome.replay_message_id or ""
        name = replay_marker_name(item)
        marker: Document = plan.marker or _sending_marker(item, copy_id, self.clock())
        if plan.marker is None and not self._claim(name, marker, item):
            return self._replay_one(self._plan(item, None), None)  # another run won
        self._sender_for(item.queue).send(result_copy(item, copy_id))
        self._documents.put(
            self._markers, name, {**marker, "status": "sent", "sent_at": self.clock().isoformat()}
        )
        return outcome

    def _update_job(
        self,
        current: Versioned,
        item: DeadLetteredMessage,
        request: RequestMessage,
        new: NewDeadline | None,
    ) -> JobStatus | None:
        """Reopen a failed or expired job and give it the new deadline; the status of a
        job that ended meanwhile (then nothing is sent), else None."""

        def change(job: Job) -> Job:
            if job.status in REOPENABLE:
                job = reopen(job, f"{REPLAYED_SETTLEMENT} of {item.queue}", self.clock)
            elif job.status.is_terminal:
                raise Conflict(f"job {job.id} is {job.status.value}", code="job_ended")
            return _extended(job, new.new, self.clock) if new is not None else job

        try:
            self._jobs.advance(current, change)
        except Conflict:  # it ended meanwhile (completed or cancelled)
            found = self._jobs.find(request.tenant_id, request.request_id)
            return found.status if found is not None else None
        except NotFound:
            pass  # deleted meanwhile: the processor records it from the copy
        return None

    def purge(self, items: list[DeadLetteredMessage]) -> list[DeadLetteredMessage]:
        """Remove ``items`` from their dead-letter queues (and their replay markers);
        the ones removed (a message someone else removed or holds is not)."""
        removed: list[DeadLetteredMessage] = []
        for queue in sorted({i.queue for i in items}):
            mine = [i for i in items if i.queue == queue]
            gone = set(self._queues.remove(queue, [i.sequence_number for i in mine]))
            for item in (i for i in mine if i.sequence_number in gone):
                self._documents.delete(self._markers, replay_marker_name(item))
                removed.append(item)
        return removed


def _sending_marker(item: DeadLetteredMessage, copy_id: str, now: datetime) -> Document:
    """A replay marker written before its copy is sent (``sending``; ``sent`` after)."""
    return {
        "queue": item.queue,
        "sequence_number": item.sequence_number,
        "message_id": item.message_id,
        "enqueued_time": _iso(item.enqueued_time),
        "replay_message_id": copy_id,
        "status": "sending",
        "started_at": now.isoformat(),
    }
