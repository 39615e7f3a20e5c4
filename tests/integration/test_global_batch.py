"""The Global Batch lane on the wire: the app's services on Azurite, the control plane
talking to the local Azure OpenAI batch emulator through the real ``openai`` SDK.

upload -> create -> poll -> download -> join, with the emulator's status progression
driven by the test; content-filter refusals, failed lines, expiry, the quota, and
cancellation of one request or a whole batch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from openai_emulator.process import OpenAIEmulator
from shared.adapters.blob_storage import AzureBlobStore
from shared.contracts import JobStatus, ProcessingMode
from tests.integration.conftest import Call, MakeBatchLane, json_body
from tests.support.global_batch import (
    DEPLOYMENT,
    BatchLane,
    Crash,
    CrashingDocuments,
    members_of,
    statuses,
    submissions_of,
)
from tests.support.global_batch import (
    submit_batch as submit,
)
from tests.support.model_handlers import SENTIMENT_SCHEMA

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
    assert members_of(batch_lane.services, submission.id) == ids  # oldest first, one file
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
    analysis = answered.analysis
    assert analysis is not None
    assert analysis.summary == "Invoice 7 is due."
    assert analysis.usage is not None
    assert analysis.usage.input_tokens > 0
    assert jobs[ids[2]].result.refusal["category"] == "hate"  # type: ignore[union-attr,index]
    assert all(job.attempts == 1 and job.batch and job.batch.batch_id for job in jobs.values())
    assert sorted(set(batch_lane.announced(tenant))) == sorted(ids)

    (closed,) = submissions_of(batch_lane.services, tenant)
    assert closed.state.value == "closed"
    assert closed.outcomes == {"completed": 3, "refused": 2}
    records = batch_lane.services.http.batches.records
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
    assert sorted(members_of(batch_lane.services, second.id)) == sorted(again)
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
    (submission,) = submissions_of(lane.services, tenant)
    # Not the intake message's id, which the queue's duplicate detection would drop.
    assert requeued.message_id == f"{broken}:requeue:{submission.id}"
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


def test_cancelling_a_batch_that_has_finished_keeps_its_answers(
    batch_lane: BatchLane, call: Call, tenant: str
) -> None:
    answered, broken = submit(call, "Answered."), submit(call, "Broken [[fail-line]].")
    batch_lane.process_queue()
    batch_lane.run()
    (submission,) = submissions_of(batch_lane.services, tenant)
    batch_lane.emulator.advance(str(submission.batch_id), to="completed")  # not polled yet
    path = f"/v1/batches/{submission.id}"
    response = call("cancel_batch", "DELETE", path, route_params={"id": submission.id})
    assert response.status_code == 202

    batch_lane.run()  # the service refuses to cancel a finished batch: its status is read

    assert batch_lane.job(tenant, answered).status is JobStatus.COMPLETED
    # The tenant gave up on what was not answered: the failed line is not requeued.
    assert batch_lane.job(tenant, broken).status is JobStatus.CANCELLED
    assert batch_lane.queue.sent[2:] == []
    (closed,) = submissions_of(batch_lane.services, tenant)
    assert closed.outcomes == {"completed": 1, "cancelled": 1}


@dataclass
class CancelledWhileCreating:
    """The tenant's DELETE lands while the control plane creates the batch: after the
    service made it, before the control plane recorded it."""

    real: Any
    cancel: Callable[[], None]

    def create_batch(self, *args: Any) -> Any:
        created = self.real.create_batch(*args)
        self.cancel()
        return created

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_cancel_that_races_the_creation_of_its_batch_cancels_that_batch(
    batch_lane: BatchLane, call: Call, tenant: str
) -> None:
    ids = [submit(call, f"Document {n}.") for n in range(2)]
    batch_lane.process_queue()
    submissions: list[str] = []

    def cancel() -> None:
        (planned,) = submissions_of(batch_lane.services, tenant)
        submissions.append(planned.id)
        path = f"/v1/batches/{planned.id}"
        response = call("cancel_batch", "DELETE", path, route_params={"id": planned.id})
        assert response.status_code == 202

    racing = batch_lane.with_ports(
        batch_service=CancelledWhileCreating(batch_lane.services.ports.batch_service, cancel)
    )
    racing.run()  # the batch exists; recording it lost to the cancellation
    restarted = batch_lane.with_ports()
    restarted.drive(tenant, ids)

    assert set(statuses(restarted, tenant, ids).values()) == {JobStatus.CANCELLED}
    (submission,) = submissions_of(restarted.services, tenant)
    assert submission.batch_id is not None, "the batch the service made was recorded"
    assert restarted.emulator.stats()["batches"][submission.batch_id]["status"] == "cancelled"
    records = restarted.services.http.batches.records
    assert records is not None
    entries = records.ledger_entries(tenant, submission.created_at.date().isoformat())
    assert [entry.batch_id for entry in entries] == [submission.batch_id]


def test_a_step_the_service_refuses_for_good_fails_the_submission_and_its_requests(
    batch_lane: BatchLane,
    call: Call,
    storage: AzureBlobStore,
    tenant: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = [submit(call, f"Document {n}.") for n in range(2)]
    batch_lane.process_queue()
    documents = batch_lane.services.ports.documents
    crashing = batch_lane.with_ports(documents=CrashingDocuments(documents, "opened"))
    with pytest.raises(Crash):
        crashing.run()  # planned, not uploaded
    (planned,) = submissions_of(batch_lane.services, tenant)
    records = batch_lane.services.http.batches.records
    assert records is not None
    storage.delete(records.container, f"files/{planned.id}/input.jsonl")

    with caplog.at_level("ERROR"):
        batch_lane.with_ports().run()

    assert f"submission {planned.id} ended failed" in caplog.text
    assert set(statuses(batch_lane, tenant, ids).values()) == {JobStatus.FAILED}
    assert batch_lane.failures(tenant) == {i: "batch_failed" for i in ids}


@dataclass
class InvalidUploads:
    """Uploads every file with its first line twice: the service's validation fails the
    batch (duplicate ``custom_id``), as it would for any file it cannot run."""

    real: Any

    def upload(self, filename: str, content: bytes, expiry_seconds: int) -> str:
        first = content.split(b"\n", 1)[0] + b"\n"
        uploaded: str = self.real.upload(filename, first + content, expiry_seconds)
        return uploaded

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_batch_the_service_fails_fails_its_requests_with_its_errors(
    batch_lane: BatchLane, call: Call, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    ids = [submit(call, f"Document {n}.") for n in range(2)]
    batch_lane.process_queue()
    invalid = batch_lane.with_ports(
        batch_service=InvalidUploads(batch_lane.services.ports.batch_service)
    )

    with caplog.at_level("ERROR"):
        invalid.drive(tenant, ids)

    assert set(statuses(invalid, tenant, ids).values()) == {JobStatus.FAILED}
    assert invalid.failures(tenant) == {i: "batch_failed" for i in ids}
    job = invalid.job(tenant, ids[0])
    assert job.error is not None
    assert "custom_id" in job.error.message  # the service's own reason, passed on
    (closed,) = submissions_of(invalid.services, tenant)
    assert closed.remote_status == "failed"
    assert f"Global Batch {closed.batch_id} ended failed" in caplog.text


def test_a_catalog_task_goes_out_with_its_instructions_and_schema_and_comes_back_checked(
    make_batch_lane: MakeBatchLane, call: Call, tenant: str, tmp_path: Any
) -> None:
    catalog = tmp_path / "models.json"
    catalog.write_text(
        json.dumps(
            {
                "tasks": {
                    "sentiment": {"instructions": "Rate it.", "output_schema": SENTIMENT_SCHEMA}
                },
                "models": {
                    "local-analyzer": {"provider": "local"},
                    "rater": {
                        "provider": "python",
                        "task": "sentiment",
                        "handler": "tests.support.model_handlers:sentiment",
                        "batch_deployment": DEPLOYMENT,
                    },
                },
            }
        )
    )
    lane = make_batch_lane(ModelCatalog=str(catalog), GlobalBatch__deployments="")
    good = submit(call, "Thanks, great service.", model="rater")
    broken = submit(call, "A message [[invalid-answer]].", model="rater")
    assert lane.process_queue() == ["staged", "staged"]
    records = lane.services.http.batches.records
    assert records is not None
    pending = records.pending(DEPLOYMENT, tenant, good)
    assert pending is not None
    body = pending.line["body"]
    assert body["messages"][0] == {"role": "system", "content": "Rate it."}
    assert body["response_format"]["json_schema"]["schema"] == SENTIMENT_SCHEMA

    lane.drive(tenant, [good])  # the other is concluded with it, then requeued

    answered = lane.job(tenant, good)
    assert answered.status is JobStatus.COMPLETED
    assert answered.result is not None
    assert (answered.result.task, answered.result.result) == (
        "sentiment",
        {"sentiment": "positive", "score": 0.0},  # the emulator's value of the schema
    )
    assert answered.result.usage is not None
    # An answer that breaks the schema is a failed line: it goes through the queue lane.
    requeued = lane.job(tenant, broken)
    assert requeued.mode is ProcessingMode.QUEUE
    assert requeued.last_error is not None
    assert "invalid_model_output: the model's answer does not match" in requeued.last_error.message
    assert lane.process_queue() == ["completed"], "the alias's own model answers it there"
    assert lane.job(tenant, broken).result.result == {"sentiment": "neutral", "score": 0.0}  # type: ignore[union-attr]
