"""The Global Batch lane's door over in-memory ports: which lane a request runs in, the
HTTP API with ``mode``, and the processor staging a batch-mode message for the control
plane (its line in ``pending/<deployment>/<tenant>/<id>.json`` of the batch container)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.in_memory import FixedBacklog, RecordingSettler
from shared.contracts import InlineText, JobStatus, Priority, ProcessingMode, RequestMessage
from shared.entrypoints.http.messages import ApiResponse
from shared.errors import ConfigurationError, FieldError, InvalidInput
from shared.global_batch.store import pending_name
from shared.inference.capacity import BudgetedModel
from shared.intake.request_rules import RequestRules
from shared.lanes import Lane
from shared.messaging import OutgoingMessage, request_envelope
from shared.processing.settlement import DeadLetterReason
from shared.request_ids import new_request_id
from shared.settings import load_settings
from shared.tracing import continue_or_start
from tests.fakes import ManualClock
from tests.support.wiring import Wired, api_request, wire

TENANT = "contoso"
DEPLOYMENT = "gpt-4o-mini-batch"
BATCH_SETTINGS = {
    "GlobalBatch__deployments": f"local-analyzer={DEPLOYMENT}",
    "GlobalBatch__endpoint": "http://127.0.0.1:9",
}
TEXT = "Invoice 12: 300 EUR due in 30 days."


def batch_wired(clock: ManualClock | None = None, **values: str) -> Wired:
    return wire(clock, settings={**BATCH_SETTINGS, "ProducerTenants": TENANT, **values})


@pytest.fixture
def batch() -> Wired:
    return batch_wired()


def body(response: ApiResponse) -> Any:
    return json.loads(response.body)


def submit(wired: Wired, text: str = TEXT, **fields: Any) -> ApiResponse:
    document = {"model": "local-analyzer", "input": {"text": text}, **fields}
    return wired.call(
        wired.http.requests.submit,
        api_request("POST", "/v1/requests", body=document, tenant=TENANT),
    )


def upload(wired: Wired, content: bytes, media_type: str) -> ApiResponse:
    request = api_request(
        "POST",
        "/v1/requests",
        body=content,
        headers={"content-type": media_type},
        params={"model": "local-analyzer", "mode": "batch"},
        tenant=TENANT,
    )
    return wired.call(wired.http.requests.submit, request)


def on_job(wired: Wired, handler: Any, method: str, job_id: str) -> ApiResponse:
    request = api_request(
        method, f"/v1/requests/{job_id}", route_params={"id": job_id}, tenant=TENANT
    )
    return wired.call(handler, request)


def accepted_id(response: ApiResponse) -> str:
    assert response.status == 202, response.body
    job_id: str = body(response)["id"]
    return job_id


def sent_body(wired: Wired, job_id: str) -> dict[str, Any]:
    (message,) = [m for m in wired.queue.sent if m.message_id == job_id]
    document: dict[str, Any] = json.loads(message.body)
    return document


def process(wired: Wired, job_id: str) -> tuple[str, RecordingSettler]:
    """Deliver the request's message to the processor, as the queue trigger does."""
    (message,) = [m for m in wired.queue.sent if m.message_id == job_id]
    settler = RecordingSettler()
    outcome = wired.services.lanes[Lane.STANDARD].processor.process(wired.deliver(message), settler)
    return outcome, settler


def staged(wired: Wired, job_id: str) -> tuple[dict[str, Any], str] | None:
    loaded = wired.documents.load("batches", pending_name(DEPLOYMENT, TENANT, job_id))
    return (dict(loaded[0]), loaded[1]) if loaded else None


def rules(**values: str) -> RequestRules:
    wired = batch_wired(None, **values)
    return RequestRules.from_settings(wired.settings, wired.services.models.catalog)


def fields_of(error: InvalidInput) -> list[str]:
    return [field.field for field in error.fields]


# --- RequestRules.mode_for ------------------------------------------------------------------


def test_batch_for_a_model_without_a_batch_deployment_is_invalid_naming_mode() -> None:
    with pytest.raises(InvalidInput, match=r"other-model.*no Global Batch deployment") as refused:
        rules().mode_for(ProcessingMode.BATCH, "other-model", Priority.NORMAL, ordered=False)

    assert fields_of(refused.value) == ["mode"]


def test_batch_for_an_ordered_request_is_invalid_naming_mode() -> None:
    with pytest.raises(InvalidInput, match="document_id or after") as refused:
        rules().mode_for(ProcessingMode.BATCH, "local-analyzer", Priority.NORMAL, ordered=True)

    assert refused.value.fields == (FieldError("mode", "not allowed with document_id or after"),)


def test_an_explicit_mode_is_kept() -> None:
    routing = rules(GlobalBatch__routePriorities="low")

    assert routing.mode_for(ProcessingMode.BATCH, "local-analyzer", Priority.HIGH, False) is (
        ProcessingMode.BATCH
    )
    assert routing.mode_for(ProcessingMode.QUEUE, "local-analyzer", Priority.LOW, False) is (
        ProcessingMode.QUEUE
    )


def test_without_a_mode_the_routed_priorities_go_to_batch_unless_ordered() -> None:
    routing = rules(GlobalBatch__routePriorities="low")

    def lane(model: str, priority: Priority, ordered: bool = False) -> ProcessingMode:
        return routing.mode_for(None, model, priority, ordered)

    assert lane("local-analyzer", Priority.LOW) is ProcessingMode.BATCH
    assert lane("local-analyzer", Priority.NORMAL) is ProcessingMode.QUEUE
    assert lane("local-analyzer", Priority.LOW, ordered=True) is ProcessingMode.QUEUE
    assert lane("other-model", Priority.LOW) is ProcessingMode.QUEUE, "no batch deployment"


def test_without_routed_priorities_every_request_without_a_mode_is_queued() -> None:
    assert rules().mode_for(None, "local-analyzer", Priority.LOW, False) is ProcessingMode.QUEUE


# --- POST /v1/requests ----------------------------------------------------------------------


def test_a_batch_request_is_accepted_without_a_deadline_and_its_message_says_batch(
    batch: Wired,
) -> None:
    job_id = accepted_id(submit(batch, mode="batch"))

    job = batch.services.jobs.get(TENANT, job_id)
    assert job.mode is ProcessingMode.BATCH
    assert job.deadline is None
    message = sent_body(batch, job_id)
    assert message["mode"] == "batch"
    assert message["deadline"] is None


def test_a_batch_request_with_deadline_seconds_keeps_its_deadline() -> None:
    clock = ManualClock()
    wired = batch_wired(clock)
    job_id = accepted_id(submit(wired, mode="batch", deadline_seconds=7200))

    deadline = clock.now + timedelta(seconds=7200)
    assert wired.services.jobs.get(TENANT, job_id).deadline == deadline
    assert sent_body(wired, job_id)["deadline"] is not None


def test_a_queue_lane_message_has_no_mode_key(batch: Wired) -> None:
    job_id = accepted_id(submit(batch))

    assert batch.services.jobs.get(TENANT, job_id).mode is ProcessingMode.QUEUE
    assert "mode" not in sent_body(batch, job_id)
    explicit = accepted_id(submit(batch, mode="queue"))
    assert "mode" not in sent_body(batch, explicit)


def test_routed_priorities_go_to_batch_over_http_unless_ordered() -> None:
    wired = batch_wired(GlobalBatch__routePriorities="low")

    low = accepted_id(submit(wired, priority="low"))
    ordered = accepted_id(submit(wired, priority="low", document_id="doc-1"))

    assert sent_body(wired, low)["mode"] == "batch"
    assert wired.services.jobs.get(TENANT, ordered).mode is ProcessingMode.QUEUE
    assert "mode" not in sent_body(wired, ordered)


def test_batch_on_a_model_without_a_deployment_is_422_naming_mode(batch: Wired) -> None:
    document = {"model": "other-model", "input": {"text": TEXT}, "mode": "batch"}
    response = batch.call(
        batch.http.requests.submit,
        api_request("POST", "/v1/requests", body=document, tenant=TENANT),
    )

    assert response.status == 422, response.body
    assert response.headers["Content-Type"] == "application/problem+json"
    assert [e["field"] for e in body(response)["errors"]] == ["mode"]
    assert batch.queue.sent == [], "nothing was accepted"


# --- the processor stages batch-mode messages ------------------------------------------------


def test_a_batch_message_is_staged_as_a_pending_line_and_completed(batch: Wired) -> None:
    job_id = accepted_id(submit(batch, mode="batch", parameters={"summary_sentences": 1}))

    outcome, settler = process(batch, job_id)

    assert outcome == "staged"
    assert settler.actions == [("complete", job_id, None, None)]
    record = staged(batch, job_id)
    assert record is not None
    pending = record[0]
    assert pending["deployment"] == DEPLOYMENT
    assert pending["request"]["request_id"] == job_id
    line = pending["line"]
    assert (line["custom_id"], line["method"], line["url"]) == (job_id, "POST", "/chat/completions")
    assert line["body"]["model"] == DEPLOYMENT
    assert line["body"]["messages"][-1] == {"role": "user", "content": TEXT}
    assert "one sentence" in line["body"]["messages"][0]["content"]
    assert batch.services.jobs.get(TENANT, job_id).status is JobStatus.ACCEPTED


def test_a_redelivered_batch_message_changes_nothing(batch: Wired) -> None:
    job_id = accepted_id(submit(batch, mode="batch"))
    process(batch, job_id)
    first = staged(batch, job_id)
    job = batch.services.jobs.get(TENANT, job_id)

    outcome, settler = process(batch, job_id)

    assert settler.actions == [("complete", job_id, None, None)]
    assert outcome in ("staged", "duplicate")
    assert staged(batch, job_id) == first, "the staged line is kept as it was"
    assert batch.services.jobs.get(TENANT, job_id) == job
    assert batch.documents.list_names("batches", "pending/") == [
        pending_name(DEPLOYMENT, TENANT, job_id)
    ]


def test_the_door_refuses_a_batch_upload_that_is_not_text(batch: Wired) -> None:
    response = upload(batch, b"%PDF-1.7 binary", "application/pdf")

    assert response.status == 422
    problem = body(response)
    assert "text only" in problem["detail"]
    assert problem["errors"] == [{"field": "mode", "message": "batch mode needs a text document"}]
    assert batch.queue.sent == []


def test_a_referenced_document_that_is_not_text_is_dead_lettered_clearly(batch: Wired) -> None:
    batch.blobs.write("incoming", f"{TENANT}/scan.pdf", b"%PDF-1.7", "application/pdf", {})
    uri = f"{batch.blobs.account_url}/incoming/{TENANT}/scan.pdf"
    job_id = accepted_id(submit(batch, mode="batch", input={"blob_uri": uri}))

    outcome, settler = process(batch, job_id)

    assert outcome == "dead-lettered"
    ((action, message_id, reason, description),) = settler.actions
    assert (action, message_id, reason) == (
        "dead_letter",
        job_id,
        DeadLetterReason.PERMANENT_FAILURE,
    )
    assert description is not None
    assert "text only" in description
    assert "application/pdf" in description
    assert staged(batch, job_id) is None
    failed = batch.services.jobs.get(TENANT, job_id)
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None
    assert "application/pdf" in failed.error.message


def test_a_line_larger_than_an_input_file_may_be_is_dead_lettered_naming_the_setting() -> None:
    wired = batch_wired(GlobalBatch__maxBytesPerFile="2000", MaxInlineTextBytes="8192")
    job_id = accepted_id(submit(wired, text="x" * 3000, mode="batch"))

    outcome, settler = process(wired, job_id)

    assert outcome == "dead-lettered"
    ((action, _, reason, description),) = settler.actions
    assert (action, reason) == ("dead_letter", DeadLetterReason.PERMANENT_FAILURE)
    assert description is not None
    assert "GlobalBatch__maxBytesPerFile" in description
    assert "2000" in description
    assert staged(wired, job_id) is None
    assert wired.services.jobs.get(TENANT, job_id).status is JobStatus.FAILED


def test_a_line_within_the_limit_is_staged() -> None:
    wired = batch_wired(GlobalBatch__maxBytesPerFile="5000", MaxInlineTextBytes="8192")
    job_id = accepted_id(submit(wired, text="x" * 3000, mode="batch"))

    assert process(wired, job_id)[0] == "staged"
    assert staged(wired, job_id) is not None


def test_a_request_cancelled_while_it_was_being_staged_does_not_go_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its caller cancelled after the processor read the job and before the line was
    written: the cancellation found no line to take back, so the processor does."""
    wired = batch_wired()
    job_id = accepted_id(submit(wired, mode="batch"))
    stager = wired.services.lanes[Lane.STANDARD].stager
    assert stager is not None
    stage = stager.stage

    def stage_then_cancelled(*args: Any, **kwargs: Any) -> bool:
        written = stage(*args, **kwargs)
        assert staged(wired, job_id) is not None
        assert on_job(wired, wired.http.requests.cancel, "DELETE", job_id).status == 200
        return written

    monkeypatch.setattr(stager, "stage", stage_then_cancelled)

    assert process(wired, job_id)[0] == "duplicate"
    assert staged(wired, job_id) is None
    assert wired.services.jobs.get(TENANT, job_id).status is JobStatus.CANCELLED


def producer_message(model: str = "local-analyzer") -> OutgoingMessage:
    """A batch-mode request message a producer sent straight to the queue (no job yet)."""
    request = RequestMessage(
        request_id=new_request_id(),
        tenant_id=TENANT,
        model=model,
        input=InlineText(text=TEXT),
        mode=ProcessingMode.BATCH,
    )
    return request_envelope(
        request,
        correlation_id=request.request_id,
        trace=continue_or_start(None),
        now=datetime.now(UTC),
    )


def adopt_and_stage(wired: Wired) -> str:
    """A producer's batch message delivered once: staged, its job recorded from it."""
    message = producer_message()
    settler = RecordingSettler()
    outcome = wired.services.lanes[Lane.STANDARD].processor.process(wired.deliver(message), settler)
    job_id = message.message_id
    assert job_id is not None
    assert outcome == "staged"
    assert settler.actions == [("complete", job_id, None, None)]
    assert staged(wired, job_id) is not None
    return job_id


def test_a_producers_batch_message_records_a_batch_mode_job(batch: Wired) -> None:
    job_id = adopt_and_stage(batch)

    assert batch.services.jobs.get(TENANT, job_id).mode is ProcessingMode.BATCH
    view = body(on_job(batch, batch.http.requests.status, "GET", job_id))
    assert view.get("batch") == {"status": "waiting"}
    on_job(batch, batch.http.requests.cancel, "DELETE", job_id)
    assert staged(batch, job_id) is None, "cancelling removes its staged line"


def test_a_producers_batch_message_without_a_deadline_gets_none(batch: Wired) -> None:
    job_id = adopt_and_stage(batch)

    job = batch.services.jobs.get(TENANT, job_id)
    assert job.deadline is None, "a batch request has a deadline only when it asks for one"


def test_a_producers_batch_message_for_a_model_without_a_deployment_is_refused(
    batch: Wired,
) -> None:
    message = producer_message("other-model")
    settler = RecordingSettler()

    outcome = batch.services.lanes[Lane.STANDARD].processor.process(batch.deliver(message), settler)

    assert outcome == "dead-lettered"
    ((action, _, reason, description),) = settler.actions
    assert (action, reason) == ("dead_letter", DeadLetterReason.INVALID_PAYLOAD)
    assert description is not None
    assert "no Global Batch deployment" in description
    assert batch.documents.list_names("batches", "pending/") == []


def test_an_ordered_batch_request_is_400_naming_mode(batch: Wired) -> None:
    response = submit(batch, mode="batch", document_id="doc-1")

    assert response.status == 400, response.body
    assert [e["field"] for e in body(response)["errors"]] == ["mode"]
    assert batch.queue.sent == []


# --- GET and DELETE of a staged request --------------------------------------------------------


def test_a_staged_request_shows_its_mode_and_that_its_batch_is_waiting(batch: Wired) -> None:
    job_id = accepted_id(submit(batch, mode="batch"))
    process(batch, job_id)

    view = body(on_job(batch, batch.http.requests.status, "GET", job_id))

    assert view["mode"] == "batch"
    assert view["batch"] == {"status": "waiting"}
    assert view["status"] == "accepted"
    assert view["deadline"] is None


def test_a_queue_lane_request_shows_no_mode_or_batch(batch: Wired) -> None:
    job_id = accepted_id(submit(batch))

    view = body(on_job(batch, batch.http.requests.status, "GET", job_id))

    assert "mode" not in view
    assert "batch" not in view


def test_cancelling_a_staged_request_removes_its_pending_line(batch: Wired) -> None:
    job_id = accepted_id(submit(batch, mode="batch"))
    other = accepted_id(submit(batch, mode="batch"))
    process(batch, job_id)
    process(batch, other)

    cancelled = on_job(batch, batch.http.requests.cancel, "DELETE", job_id)

    assert cancelled.status == 200
    assert body(cancelled)["status"] == "cancelled"
    assert staged(batch, job_id) is None
    assert staged(batch, other) is not None, "only the cancelled request's line goes"


# --- settings -----------------------------------------------------------------------------------

BAD_BATCH_SETTINGS = [
    pytest.param(
        {"GlobalBatch__deployments": "x", "GlobalBatch__endpoint": "http://e"},
        "'x' is not alias=deployment",
        id="malformed",
    ),
    pytest.param(
        {"GlobalBatch__deployments": "local-analyzer=d"},
        "GlobalBatch__deployments needs GlobalBatch__endpoint",
        id="no-endpoint",
    ),
]


@pytest.mark.parametrize(("values", "message"), BAD_BATCH_SETTINGS)
def test_bad_global_batch_settings_are_a_clear_configuration_error(
    values: dict[str, str], message: str, tmp_path: Path
) -> None:
    environ = {"AllowedModels": "local-analyzer", **values}

    with pytest.raises(ConfigurationError) as invalid:
        load_settings(environ, tmp_path / "absent.json")

    assert message in str(invalid.value)


@pytest.mark.parametrize(("values", "message"), BAD_BATCH_SETTINGS)
def test_bad_global_batch_settings_cannot_build_settings(
    values: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match="GlobalBatch__deployments") as invalid:
        wire(settings=values)

    assert message in str(invalid.value)


def test_a_batch_deployment_for_a_model_not_served_stops_the_services() -> None:
    with pytest.raises(ConfigurationError) as invalid:
        wire(
            settings={
                "GlobalBatch__deployments": "gpt-4o=batch-4o",
                "GlobalBatch__endpoint": "http://e",
            },
        )

    assert (
        "GlobalBatch__deployments names models that AllowedModels/ModelProvider does not "
        "serve: gpt-4o (served: local-analyzer, other-model)" in str(invalid.value)
    )


def test_the_azure_openai_endpoint_serves_as_the_batch_endpoint(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "AllowedModels": "local-analyzer",
            "GlobalBatch__deployments": "local-analyzer=d",
            "AzureOpenAI__endpoint": "https://aoai.example",
        },
        tmp_path / "absent.json",
    )

    assert settings.batch_deployments == {"local-analyzer": "d"}
    assert settings.batch_endpoint == "https://aoai.example"


def test_mode_auto_takes_the_batch_lane_only_when_the_queue_lane_would_be_late() -> None:
    standard = FixedBacklog(0)
    wired = wire(
        ports={"backlogs": {Lane.STANDARD: standard}},
        settings={**BATCH_SETTINGS, "ProducerTenants": TENANT},
        ModelCapacity__tokensPerMinute="6000",  # 100 tokens a second
        MaxQueueBacklog="5000",
        BacklogCacheSeconds="0",
    )
    soon = submit(wired, mode="auto", deadline_seconds=600)
    assert soon.status == 202
    assert wired.services.jobs.get(TENANT, body(soon)["id"]).mode is ProcessingMode.QUEUE

    # Before the model's first answer a request ahead costs what this one's prompt does.
    client = wired.services.models["local-analyzer"].client
    assert isinstance(client, BudgetedModel)
    cost = client.typical(len(TEXT), {})
    standard.depth = 100_000 // cost  # about 1,000 s of work ahead
    late = submit(wired, mode="auto", deadline_seconds=600)
    assert late.status == 202
    job = wired.services.jobs.get(TENANT, body(late)["id"])
    assert job.mode is ProcessingMode.BATCH
    assert job.deadline is not None, "the deadline it asked for still holds"

    queued = submit(wired, mode="queue", deadline_seconds=600)
    assert queued.status == 503
    ahead = standard.depth + 1  # the depth read (no cache), and this one
    assert int(queued.headers["Retry-After"]) == math.ceil(ahead * cost / 100)
    assert "too close to this request's deadline (600 s)" in body(queued)["detail"]
    ordered = submit(wired, mode="auto", deadline_seconds=600, document_id="doc-1")
    assert ordered.status == 503, "an ordered step cannot leave its order"
