"""A crash between any two steps of the Global Batch control plane loses and duplicates
nothing: the next run (a restarted process over the same storage and service) finishes
what the dead one began, with one input file, one batch, one ledger entry and one
completion per request.

Each case kills the run right after a step's real work was done and before (or right
after) the app recorded it: the service took the upload or created the batch but the
submission does not say so yet; the submission was saved in a state but the next step
never ran; the output was downloaded but not kept; some members were concluded and
announced but not all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from shared.adapters.in_memory import RecordingPublisher
from shared.contracts import JobStatus
from shared.documents import Document, Tags
from shared.errors import TransientError
from shared.events.announcements import Announcer
from shared.global_batch.conclusion import Conclusion, ConclusionPolicy
from shared.global_batch.control_plane import ControlPolicy, GlobalBatchControlPlane
from shared.global_batch.planning import PlanningPolicy
from shared.processing.endings import JobEndings
from tests.integration.conftest import Call
from tests.support.global_batch import (
    DEPLOYMENT,
    BatchLane,
    Crash,
    CrashingDocuments,
    CrashingPublisher,
    CrashingService,
    members_of,
    statuses,
    submissions_of,
)
from tests.support.global_batch import submit_batch as submit

pytestmark = pytest.mark.integration

SERVICE_CALLS = ["upload", "create_batch", "get_batch", "download"]
SAVED_STATES = ["opened", "uploaded", "submitted", "ended", "closed"]


def crash_ports(lane: BatchLane, where: str) -> dict[str, Any]:
    kind, _, point = where.partition(":")
    if kind == "service":
        service = lane.services.ports.batch_service
        assert service is not None, "the batch lane has its service"
        return {"batch_service": CrashingService(service, point)}
    if kind == "saved":
        return {"documents": CrashingDocuments(lane.services.ports.documents, point)}
    assert isinstance(lane.services.ports.events, RecordingPublisher)
    return {"events": CrashingPublisher(lane.services.ports.events, int(point))}


@pytest.mark.parametrize(
    "where",
    [f"service:{call}" for call in SERVICE_CALLS]
    + [f"saved:{state}" for state in SAVED_STATES]
    + ["announced:2"],
)
def test_a_crash_anywhere_loses_and_duplicates_nothing(
    batch_lane: BatchLane, call: Call, tenant: str, where: str
) -> None:
    texts = ["First. One.", "Second. Two.", "Third [[refuse-answer]].", "Fourth. Four."]
    ids = [submit(call, text) for text in texts]
    batch_lane.process_queue()
    before = batch_lane.emulator.stats()

    crashing = batch_lane.with_ports(**crash_ports(batch_lane, where))
    with pytest.raises(Crash):
        crashing.drive(tenant, ids)
    restarted = batch_lane.with_ports()
    restarted.drive(tenant, ids)

    assert set(statuses(restarted, tenant, ids).values()) == {JobStatus.COMPLETED}
    assert sorted(set(restarted.announced(tenant))) == sorted(ids)
    (submission,) = submissions_of(restarted.services, tenant)
    assert submission.state.value == "closed"
    assert submission.outcomes == {"completed": 3, "refused": 1}
    after = batch_lane.emulator.stats()
    assert after["files_uploaded"] - before["files_uploaded"] == 1
    assert after["batches_created"] - before["batches_created"] == 1
    assert all(restarted.job(tenant, i).attempts == 1 for i in ids)
    records = restarted.services.http.batches.records
    assert records is not None
    entries = records.ledger_entries(tenant, submission.created_at.date().isoformat())
    assert [entry.submission_id for entry in entries] == [submission.id]
    assert entries[0].outcomes == submission.outcomes
    documents = restarted.services.ports.documents
    assert documents.list_names(records.container, f"pending/{DEPLOYMENT}/{tenant}/") == []
    assert documents.list_names(records.container, f"open/{submission.id}") == []


def test_a_conclusion_that_dies_while_resubmitting_counts_each_resubmission_once(
    batch_lane: BatchLane, call: Call, tenant: str
) -> None:
    ids = [submit(call, f"Expiring {n}.") for n in range(3)]
    batch_lane.process_queue()
    batch_lane.run()
    (first,) = submissions_of(batch_lane.services, tenant)
    batch_lane.emulator.expire(str(first.batch_id), completed_lines=0)

    crashing = batch_lane.with_ports(
        documents=CrashingDocuments(batch_lane.services.ports.documents, "restaged")
    )
    with pytest.raises(Crash):
        crashing.run()
    restarted = batch_lane.with_ports()
    restarted.drive(tenant, ids)

    assert set(statuses(restarted, tenant, ids).values()) == {JobStatus.COMPLETED}
    assert {restarted.job(tenant, i).batch.resubmissions for i in ids} == {1}  # type: ignore[union-attr]
    second = [s for s in submissions_of(restarted.services, tenant) if s.id != first.id]
    assert [sorted(members_of(restarted.services, s.id)) for s in second] == [sorted(ids)]


def test_a_failed_line_whose_requeue_could_not_be_sent_is_sent_by_the_next_run(
    batch_lane: BatchLane, call: Call, tenant: str
) -> None:
    broken = submit(call, "Broken [[fail-line]].")
    batch_lane.process_queue()
    batch_lane.queue.fail_with = TransientError("the broker is down")
    batch_lane.drive(tenant, [], rounds=3)
    assert batch_lane.job(tenant, broken).status is JobStatus.ACCEPTED
    (submission,) = submissions_of(batch_lane.services, tenant)
    assert submission.state.value == "ended"  # concluding waits for the broker

    batch_lane.queue.fail_with = None
    batch_lane.run()
    assert batch_lane.process_queue() == ["completed"]
    assert batch_lane.job(tenant, broken).status is JobStatus.COMPLETED
    (closed,) = submissions_of(batch_lane.services, tenant)
    assert closed.outcomes == {"requeued": 1}


@dataclass
class TickingDocuments(CrashingDocuments):
    """Each saved submission takes a second of a manual clock: runs out of time on cue."""

    clock: list[float] = field(default_factory=lambda: [0.0])

    def replace(
        self, container: str, name: str, document: Document, etag: str, tags: Tags | None = None
    ) -> str:
        if name.startswith("submissions/"):
            self.clock[0] += 1.0
        return super().replace(container, name, document, etag, tags)


def test_a_run_stops_when_its_time_is_up_and_the_next_goes_on(
    batch_lane: BatchLane, call: Call, tenant: str
) -> None:
    ids = [submit(call, f"Document {n}.") for n in range(5)]
    batch_lane.process_queue()
    services = batch_lane.services
    documents = TickingDocuments(services.ports.documents, after_state="never")
    ticking = batch_lane.with_ports(documents=documents)
    assert ticking.services.http.batches.records is not None
    assert services.ports.batch_service is not None
    control_plane = GlobalBatchControlPlane(
        records=ticking.services.http.batches.records,
        service=services.ports.batch_service,
        jobs=ticking.services.jobs,
        conclusion=Conclusion(
            records=ticking.services.http.batches.records,
            jobs=ticking.services.jobs,
            endings=JobEndings(ticking.services.jobs, Announcer(ticking.events, None)),
            announcer=Announcer(ticking.events, None),
            requeue=ticking.queue,
            policy=ConclusionPolicy(failed_lines="queue", max_resubmissions=2),
            catalog=services.models.catalog,
        ),
        policy=ControlPolicy(
            planning=PlanningPolicy(
                max_lines_per_file=100,
                max_bytes_per_file=1_000_000,
                submit_at_lines=1,
                submit_after=timedelta(0),
            ),
            output_expiry_seconds=1_209_600,
            quota_retry=timedelta(seconds=1),
            quota_retry_max=timedelta(seconds=1),
            poll_interval=timedelta(0),
            run_budget=timedelta(seconds=2.5),
            chunk=2,
        ),
        monotonic=lambda: documents.clock[0],
    )

    control_plane.run()  # uploaded, submitted, 2 members marked: out of time
    (submission,) = submissions_of(ticking.services, tenant)
    assert (submission.state.value, submission.marked) == ("submitted", 2)
    control_plane.run()  # the other 3 marked, polled
    (submission,) = submissions_of(ticking.services, tenant)
    assert submission.marked == 5
    batch_lane.emulator.advance(str(submission.batch_id), to="completed")
    control_plane.run()  # ended, 4 members concluded: out of time
    (submission,) = submissions_of(ticking.services, tenant)
    assert (submission.state.value, submission.concluded) == ("ended", 4)
    assert len(set(ticking.announced(tenant))) == 4
    report = control_plane.run()

    assert report.closed == [submission.id]
    assert set(statuses(ticking, tenant, ids).values()) == {JobStatus.COMPLETED}
    assert sorted(ticking.announced(tenant)) == sorted(ids)  # each exactly once
    (closed,) = submissions_of(ticking.services, tenant)
    assert closed.outcomes == {"completed": 5}
    assert closed.input_tokens > 0
