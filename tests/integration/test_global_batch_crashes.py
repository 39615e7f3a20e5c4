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

from typing import Any

import pytest

from shared.adapters.in_memory import RecordingPublisher
from shared.contracts import JobStatus
from tests.integration.conftest import Call
from tests.support.global_batch import (
    DEPLOYMENT,
    BatchLane,
    Crash,
    CrashingDocuments,
    CrashingPublisher,
    CrashingService,
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
        return {"batch_service": CrashingService(lane.services.ports.batch_service, point)}
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
    records = restarted.services.batch_records
    assert records is not None
    entries = records.ledger_entries(tenant, submission.created_at.date().isoformat())
    assert [entry.submission_id for entry in entries] == [submission.id]
    assert entries[0].outcomes == submission.outcomes
    documents = restarted.services.ports.documents
    assert documents.list_names(records.container, f"pending/{DEPLOYMENT}/{tenant}/") == []
    assert documents.list_names(records.container, f"open/{submission.id}") == []
