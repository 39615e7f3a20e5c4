"""The Global Batch lane on the wire: the app's services on Azurite, the control plane
talking to the local Azure OpenAI batch emulator through the real ``openai`` SDK.

upload -> create -> poll -> download -> join, with the emulator's status progression
driven by the test; content-filter refusals, failed lines, expiry, the quota, and
cancellation of one request or a whole batch.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from openai_emulator.process import OpenAIEmulator
from shared.contracts import JobStatus, ProcessingMode
from tests.integration.conftest import Call, MakeBatchLane, json_body
from tests.support.global_batch import (
    DEPLOYMENT,
    BatchLane,
    statuses,
    submissions_of,
)
from tests.support.global_batch import (
    submit_batch as submit,
)

pytestmark = pytest.mark.integration


def status(call: Call, request_id: str) -> dict[str, Any]:
    response = call(
        "get_request", "GET", f"/v1/requests/{request_id}", route_params={"id": request_id}
    )
    assert response.status_code == 200, response.get_body()
    document: dict[str, Any] = json_body(response)
    return document


def input_lines(emulator: OpenAIEmulator, batch_id: str) -> int:
    return int(emulator.stats()["batches"][batch_id]["lines"])


def test_batch_requests_complete_through_upload_create_poll_download_join(
    batch_lane: BatchLane, call: Call, tenant: str
) -> None:
    texts = ["Invoice 7 is due. Pay soon.", "A contract. Signed.", "[[refuse-prompt]] hateful",
             "A report [[refuse-answer]].", "An email to the team."]  # fmt: skip
    ids = [submit(call, text) for text in texts]
    before = batch_lane.emulator.stats()
    assert batch_lane.process_queue() == ["staged"] * 5
    assert {action for action, *_ in batch_lane.settled} == {"complete"}
    assert status(call, ids[0])["batch"] == {"status": "waiting"}

    first = batch_lane.run()
    assert len(first.planned) == 1
    (submission,) = submissions_of(batch_lane.services, tenant)
    assert submission.members == ids  # oldest first, one file for the tenant
    view = status(call, ids[0])
    assert view["status"] == "running"
    assert view["mode"] == "batch"
    assert view["batch"]["submission_id"] == submission.id
    assert view["batch"]["status"] == "validating"
    after = batch_lane.emulator.stats()
    assert after["files_uploaded"] - before["files_uploaded"] == 1
    assert after["batches_created"] - before["batches_created"] == 1
    assert input_lines(batch_lane.emulator, str(submission.batch_id)) == 5

    batch_lane.drive(tenant, ids)
    jobs = {i: batch_lane.job(tenant, i) for i in ids}
    assert all(job.status is JobStatus.COMPLETED for job in jobs.values())
    outcomes = [jobs[i].result.outcome for i in ids]  # type: ignore[union-attr]
    assert outcomes == ["completed", "completed", "refused", "refused", "completed"]
    answered = jobs[ids[0]].result
    assert answered is not None
    assert answered.result is not None
    assert answered.result.summary == "Invoice 7 is due."
    assert answered.result.usage is not None
    assert answered.result.usage.input_tokens > 0
    assert jobs[ids[2]].result.refusal["category"] == "hate"  # type: ignore[union-attr,index]
    assert all(job.attempts == 1 and job.batch and job.batch.batch_id for job in jobs.values())
    assert sorted(set(batch_lane.announced(tenant))) == sorted(ids)

    (closed,) = submissions_of(batch_lane.services, tenant)
    assert closed.state.value == "closed"
    assert closed.outcomes == {"completed": 3, "refused": 2}
    records = batch_lane.services.batch_records
    assert records is not None
    kept = records.kept_file(closed.id, "output")
    assert kept is not None
    assert len(kept.splitlines()) == 4
    assert records.kept_file(closed.id, "errors") is not None
    (entry,) = records.ledger_entries(tenant, closed.created_at.date().isoformat())
    assert entry.requests == 5
    assert entry.batch_id == closed.batch_id
    assert entry.input_tokens > 0
    assert entry.total_tokens == entry.input_tokens + entry.output_tokens
    assert (
        batch_lane.services.ports.documents.list_names(
            records.container, f"pending/{DEPLOYMENT}/{tenant}/"
        )
        == []
    )
    response = call("get_batch", "GET", f"/v1/batches/{closed.id}", route_params={"id": closed.id})
    assert json_body(response)["status"] == "closed"
    assert json_body(response)["request_counts"] == {"total": 5, "completed": 4, "failed": 1}


def test_an_expired_batch_submits_again_what_it_did_not_answer(
    batch_lane: BatchLane, call: Call, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    ids = [submit(call, f"Document number {n}.") for n in range(4)]
    batch_lane.process_queue()
    batch_lane.run()
    (submission,) = submissions_of(batch_lane.services, tenant)
    batch_lane.emulator.advance(str(submission.batch_id), to="in_progress")
    batch_lane.emulator.expire(str(submission.batch_id), completed_lines=2)

    with caplog.at_level("ERROR"):
        batch_lane.run()
    assert f"Global Batch {submission.batch_id} ended expired" in caplog.text
    states = statuses(batch_lane, tenant, ids)
    assert list(states.values()).count(JobStatus.COMPLETED) == 2
    # The same run closes the expired submission and submits the other two again.
    again = [i for i, s in states.items() if s is not JobStatus.COMPLETED]
    assert [states[i] for i in again] == [JobStatus.RUNNING] * 2
    (second,) = (s for s in submissions_of(batch_lane.services, tenant) if s.id != submission.id)
    assert sorted(second.members) == sorted(again)
    assert status(call, again[0])["batch"]["submission_id"] == second.id
    assert batch_lane.job(tenant, again[0]).batch.resubmissions == 1  # type: ignore[union-attr]

    batch_lane.drive(tenant, ids)
    assert set(statuses(batch_lane, tenant, ids).values()) == {JobStatus.COMPLETED}
    assert sorted(set(batch_lane.announced(tenant))) == sorted(ids)


def test_an_expired_batch_past_its_resubmissions_expires_its_requests(
    make_batch_lane: MakeBatchLane, call: Call, tenant: str
) -> None:
    lane = make_batch_lane(**{"GlobalBatch__maxResubmissions": "0"})
    ids = [submit(call, f"Document {n}.") for n in range(2)]
    lane.process_queue()
    lane.run()
    (submission,) = submissions_of(lane.services, tenant)
    lane.emulator.expire(str(submission.batch_id), completed_lines=0)
    lane.run()
    assert set(statuses(lane, tenant, ids).values()) == {JobStatus.EXPIRED}
    assert lane.failures(tenant) == {i: "batch_expired" for i in ids}


def test_a_batch_refused_for_the_token_quota_waits_and_is_created_again(
    batch_lane: BatchLane, call: Call, tenant: str
) -> None:
    ids = [submit(call, "A long enough document to count some tokens.") for _ in range(3)]
    batch_lane.process_queue()
    batch_lane.emulator.set_quota(5)
    batch_lane.run()
    (submission,) = submissions_of(batch_lane.services, tenant)
    refused_batch = str(submission.batch_id)
    batch_lane.emulator.advance(refused_batch)  # validation meets the quota
    assert batch_lane.emulator.stats()["batches"][refused_batch]["status"] == "failed"

    batch_lane.run()
    (waiting,) = submissions_of(batch_lane.services, tenant)
    assert waiting.state.value == "uploaded"
    assert waiting.refused_batches == [refused_batch]
    assert set(statuses(batch_lane, tenant, ids).values()) == {JobStatus.RUNNING}
    assert batch_lane.failures(tenant) == {}

    batch_lane.emulator.set_quota(None)
    time.sleep(0.25)  # GlobalBatch__quotaRetrySeconds
    batch_lane.drive(tenant, ids)
    assert set(statuses(batch_lane, tenant, ids).values()) == {JobStatus.COMPLETED}
    of_this_file = [b for b in batch_lane.emulator.stats()["batches"].values()
                    if b["input_file_id"] == waiting.file_id]  # fmt: skip
    assert len(of_this_file) == 2  # the refused one and the one that ran: one file uploaded


@pytest.mark.parametrize("failed_lines", ["queue", "fail"])
def test_a_line_the_service_could_not_answer_is_requeued_or_failed(
    make_batch_lane: MakeBatchLane, call: Call, tenant: str, failed_lines: str
) -> None:
    lane = make_batch_lane(**{"GlobalBatch__failedLines": failed_lines})
    ok, broken = submit(call, "Fine."), submit(call, "Broken [[fail-line]].")
    lane.process_queue()
    sent_before = len(lane.queue.sent)
    lane.drive(tenant, [ok], rounds=6)
    assert lane.job(tenant, ok).status is JobStatus.COMPLETED
    if failed_lines == "fail":
        assert lane.job(tenant, broken).status is JobStatus.FAILED
        assert lane.failures(tenant) == {broken: "batch_line_failed"}
        return
    job = lane.job(tenant, broken)
    assert job.status is JobStatus.ACCEPTED
    assert job.mode is ProcessingMode.QUEUE
    assert job.last_error is not None
    assert "server_error" in job.last_error.message
    (requeued,) = lane.queue.sent[sent_before:]
    assert "mode" not in json.loads(requeued.body)  # a queue-lane message
    assert lane.process_queue() == ["completed"]
    assert lane.job(tenant, broken).status is JobStatus.COMPLETED


def test_cancelling_a_request_before_and_after_it_went_out(
    batch_lane: BatchLane, call: Call, tenant: str
) -> None:
    early, late, kept = (submit(call, f"Document {n}.") for n in range(3))
    batch_lane.process_queue()
    response = call("cancel_request", "DELETE", f"/v1/requests/{early}", route_params={"id": early})
    assert response.status_code == 200
    batch_lane.run()
    (submission,) = submissions_of(batch_lane.services, tenant)
    assert input_lines(batch_lane.emulator, str(submission.batch_id)) == 2  # early never went out
    response = call("cancel_request", "DELETE", f"/v1/requests/{late}", route_params={"id": late})
    assert response.status_code == 200
    batch_lane.drive(tenant, [kept])
    assert statuses(batch_lane, tenant, [early, late, kept]) == {
        early: JobStatus.CANCELLED, late: JobStatus.CANCELLED, kept: JobStatus.COMPLETED,
    }  # fmt: skip
    assert batch_lane.announced(tenant) == [kept]


def test_cancelling_a_whole_batch_cancels_every_request_in_it(
    batch_lane: BatchLane, call: Call, tenant: str
) -> None:
    ids = [submit(call, f"Document {n}.") for n in range(3)]
    batch_lane.process_queue()
    batch_lane.run()
    (submission,) = submissions_of(batch_lane.services, tenant)
    batch_lane.emulator.advance(str(submission.batch_id))  # in_progress
    path = f"/v1/batches/{submission.id}"
    other = call(
        "cancel_batch", "DELETE", path, route_params={"id": submission.id}, as_tenant="someone-else"
    )
    assert other.status_code == 404
    response = call("cancel_batch", "DELETE", path, route_params={"id": submission.id})
    assert response.status_code == 202
    assert json_body(response)["cancel_requested"] is True

    batch_lane.run()  # the control plane cancels the service batch
    assert batch_lane.emulator.stats()["batches"][submission.batch_id]["status"] == "cancelling"
    batch_lane.drive(tenant, ids)
    assert set(statuses(batch_lane, tenant, ids).values()) == {JobStatus.CANCELLED}
    assert batch_lane.failures(tenant) == {i: "batch_cancelled" for i in ids}
    again = call("cancel_batch", "DELETE", path, route_params={"id": submission.id})
    assert again.status_code == 409


def test_the_batch_door_refuses_what_the_lane_cannot_take(
    batch_lane: BatchLane, call: Call
) -> None:
    body = {"model": "other-model", "input": {"text": "x"}, "mode": "batch"}
    response = call("submit_request", "POST", "/v1/requests", body=body)
    assert response.status_code == 422
    assert "no Global Batch deployment" in json_body(response)["detail"]
    body = {"model": "local-analyzer", "input": {"text": "x"}, "mode": "batch", "document_id": "d"}
    response = call("submit_request", "POST", "/v1/requests", body=body)
    assert response.status_code == 400
    assert json_body(response)["errors"][0]["field"] == "mode"
    assert batch_lane.queue.sent == []
