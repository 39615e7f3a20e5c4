"""What a request costs: the cost function, and the cost each result and announcement carry.

The cost function is pure (``shared.accounting.cost``); the queue lane's result is built by
the processor the app wires (in-memory ports, the local analyzer, a catalog file with
prices), the Global Batch lane's by its conclusion of an answer line.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from shared.accounting.cost import COST_DECIMAL_PLACES, request_cost
from shared.adapters.in_memory import (
    InMemoryBlobs,
    InMemoryDocuments,
    RecordingPublisher,
    RecordingSender,
    RecordingSettler,
)
from shared.contracts import (
    Cost,
    InlineText,
    Job,
    JobStatus,
    ProcessingMode,
    RequestMessage,
    ResultDocument,
)
from shared.events.announcements import (
    COMPLETED,
    Announcer,
    cloud_events,
    result_announcement,
    topic_message,
)
from shared.global_batch.conclusion import Conclusion, ConclusionPolicy
from shared.global_batch.records import MemberFacts, Submission
from shared.global_batch.store import BatchRecords
from shared.inference.prices import Prices
from shared.jobs import DocumentJobStore, JobRepository
from shared.lanes import Lane
from shared.processing.endings import JobEndings
from tests.support.catalogs import catalog, priced_catalog_file
from tests.support.jobs import usage
from tests.support.wiring import Wired, api_request, wire

USD = "USD"
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TENANT = "t1"
SENTIMENT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["sentiment"],
    "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]}},
}


def prices(
    input_per_million: str = "2.5", output_per_million: str = "10", batch_discount: str = "0.5"
) -> Prices:
    return Prices(
        USD, Decimal(input_per_million), Decimal(output_per_million), Decimal(batch_discount)
    )


# --- the cost function --------------------------------------------------------------------------


def test_the_queue_lane_pays_the_online_price_per_million_tokens() -> None:
    cost = request_cost(usage(1_000, 200), prices(), ProcessingMode.QUEUE)
    # 1,000 x 2.5 / 1M + 200 x 10 / 1M = 0.0025 + 0.002
    assert cost == Cost(amount=Decimal("0.0045"), currency=USD)


def test_the_global_batch_lane_takes_its_discount_off() -> None:
    cost = request_cost(usage(1_000, 200), prices(), ProcessingMode.BATCH)
    assert cost == Cost(amount=Decimal("0.00225"), currency=USD)
    undiscounted = request_cost(usage(1_000, 200), prices(batch_discount="0"), ProcessingMode.BATCH)
    assert undiscounted == request_cost(usage(1_000, 200), prices(), ProcessingMode.QUEUE)


def test_no_prices_or_no_usage_is_an_unknown_cost_not_a_free_one() -> None:
    assert request_cost(usage(1_000, 200), None, ProcessingMode.QUEUE) is None
    assert request_cost(None, prices(), ProcessingMode.QUEUE) is None
    free = request_cost(usage(1_000, 200), prices("0", "0"), ProcessingMode.QUEUE)
    assert free == Cost(amount=Decimal(0), currency=USD), "a price of 0 is known: free"


def test_decimal_prices_cost_exactly_where_floats_would_not() -> None:
    """0.1 + 0.2 != 0.3 in binary floats; three tokens at 0.1 a token (100,000 per
    million) cost 0.3 exactly."""
    cost = request_cost(usage(1, 2), prices("100000", "100000"), ProcessingMode.QUEUE)
    assert cost is not None
    assert cost.amount == Decimal("0.3")


def test_an_amount_is_rounded_half_to_even_once_at_ten_places() -> None:
    assert COST_DECIMAL_PLACES == 10
    # One token at 0.00015 per million: 1.5e-10, half way between 1e-10 and 2e-10 -> 2e-10.
    up = request_cost(usage(1, 0), prices("0.00015", "0"), ProcessingMode.QUEUE)
    # One token at 0.00025: 2.5e-10 -> 2e-10 (to the even neighbour, not up).
    down = request_cost(usage(1, 0), prices("0.00025", "0"), ProcessingMode.QUEUE)
    assert up is not None
    assert down is not None
    assert up.amount == Decimal("2E-10")
    assert down.amount == Decimal("2E-10")
    # Rounded once, after the discount: 1.5e-10 less a fifth is 1.2e-10 -> 1e-10 (rounding
    # the online amount first would give 2e-10, less a fifth 1.6e-10 -> 2e-10).
    batch = request_cost(usage(1, 0), prices("0.00015", "0", "0.2"), ProcessingMode.BATCH)
    assert batch is not None
    assert batch.amount == Decimal("1E-10")


def test_a_cost_is_written_to_json_as_a_number_and_read_back_exactly() -> None:
    cost = request_cost(usage(10, 0), prices("0.15", "0"), ProcessingMode.QUEUE)
    assert cost is not None
    written = json.loads(cost.model_dump_json())
    assert written == {"amount": 1.5e-06, "currency": USD}
    assert Cost.model_validate(written).amount == Decimal("0.0000015")


def test_a_cost_refuses_a_negative_amount_or_a_currency_that_is_not_a_code() -> None:
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        Cost(amount=Decimal(-1), currency=USD)
    with pytest.raises(ValueError, match="should match pattern"):
        Cost(amount=Decimal(1), currency="dollars")


# --- results and announcements ------------------------------------------------------------------


def result_of(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema": "inferbus.result/v1",
        "request_id": "r1",
        "tenant_id": TENANT,
        "model": "rater",
        "task": "sentiment",
        "outcome": "completed",
        "result": {"sentiment": "neutral"},
        "usage": {"input_tokens": 6, "output_tokens": 2, "total_tokens": 8},
        "completed_at": NOW.isoformat(),
    }
    return {**document, **changes}


def test_a_result_stored_before_costs_were_kept_still_reads_with_no_cost() -> None:
    assert ResultDocument.model_validate(result_of()).cost is None


def test_a_stored_cost_reads_back_as_the_same_decimal() -> None:
    stored = ResultDocument.model_validate(
        result_of(cost={"amount": 4.5e-05, "currency": USD})
    ).model_dump(mode="json", by_alias=True)
    assert stored["cost"] == {"amount": 4.5e-05, "currency": USD}
    cost = ResultDocument.model_validate(stored).cost
    assert cost == Cost(amount=Decimal("0.000045"), currency=USD)


def test_an_announcement_carries_its_results_cost_in_the_event_data_only() -> None:
    cost = {"amount": 4.5e-05, "currency": USD}
    request = RequestMessage(
        request_id="r1", tenant_id=TENANT, model="rater", input=InlineText(text="Fine.")
    )
    job = job_of(request, status=JobStatus.COMPLETED, result=result_of(cost=cost))
    announcement = result_announcement(request, job, {}, None)

    (event,) = cloud_events(announcement)
    assert event.data["cost"] == cost
    message = topic_message(announcement)
    assert json.loads(message.body)["cost"] == cost
    assert "cost" not in message.application_properties
    unpriced = result_announcement(
        request, job.model_copy(update={"result": ResultDocument(**result_of())}), {}, None
    )
    assert cloud_events(unpriced)[0].data["cost"] is None


def job_of(request: RequestMessage, **changes: Any) -> Job:
    fields: dict[str, Any] = {
        "id": request.request_id,
        "tenant_id": request.tenant_id,
        "model": request.model,
        "input": request.input,
        "correlation_id": request.request_id,
        "created_at": NOW - timedelta(minutes=1),
        "updated_at": NOW - timedelta(minutes=1),
        "mode": request.mode,
    }
    return Job.model_validate({**fields, **changes})


# --- the queue lane -------------------------------------------------------------------------------


def completed_through_the_queue(wired: Wired, model: str) -> Job:
    """A request for ``model`` submitted over HTTP and processed: its job."""
    body = {"model": model, "input": {"text": "Invoice 12: 300 EUR due in 30 days."}}
    submitted = wired.call(
        wired.http.requests.submit, api_request("POST", "/v1/requests", body=body, tenant=TENANT)
    )
    assert submitted.status == 202, submitted.body
    request_id = json.loads(submitted.body)["id"]
    message = next(m for m in wired.queue.sent if m.message_id == request_id)
    settler = RecordingSettler()
    wired.services.lanes[Lane.STANDARD].processor.process(wired.deliver(message), settler)
    assert settler.actions == [("complete", request_id, None, None)]
    return wired.services.jobs.get(TENANT, request_id)


def test_a_queue_lane_result_and_its_announcements_carry_the_online_cost(
    tmp_path: Path,
) -> None:
    topic = RecordingSender()
    wired = wire(ports={"results_topic": topic}, ModelCatalog=priced_catalog_file(tmp_path))

    job = completed_through_the_queue(wired, "local-analyzer")

    assert job.result is not None
    assert job.result.usage is not None
    used = job.result.usage
    expected = (used.input_tokens * Decimal("2.5") + used.output_tokens * 10) / 1_000_000
    assert job.result.cost == Cost(amount=expected, currency=USD)
    assert expected > 0
    stored = json.loads(job.result.model_dump_json(by_alias=True))
    assert stored["cost"] == {"amount": float(expected), "currency": USD}
    (completed,) = [e for e in wired.published.published if e.type == COMPLETED]
    assert completed.data["cost"] == {"amount": float(expected), "currency": USD}
    (message,) = topic.sent
    assert json.loads(message.body)["cost"] == {"amount": float(expected), "currency": USD}


def test_a_queue_lane_result_of_an_alias_without_prices_has_no_cost(tmp_path: Path) -> None:
    wired = wire(ModelCatalog=priced_catalog_file(tmp_path))

    job = completed_through_the_queue(wired, "unpriced")

    assert job.result is not None
    assert job.result.usage is not None, "its tokens are known; their price is not"
    assert job.result.cost is None
    (completed,) = [e for e in wired.published.published if e.type == COMPLETED]
    assert completed.data["cost"] is None


# --- the Global Batch lane ------------------------------------------------------------------------


def answer_line(request_id: str, input_tokens: int, output_tokens: int) -> dict[str, Any]:
    """An output line of the service's batch: a chat completion answering ``request_id``."""
    completion = {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": '{"sentiment": "neutral"}'},
            }
        ],
        "usage": {
            "prompt_tokens": input_tokens,
            "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        },
    }
    return {
        "custom_id": request_id,
        "response": {"status_code": 200, "body": completion},
        "error": None,
    }


def test_a_global_batch_result_and_its_announcements_carry_the_discounted_cost() -> None:
    models = catalog(
        {
            "currency": USD,
            "tasks": {"sentiment": {"instructions": "Rate it.", "output_schema": SENTIMENT}},
            "models": {
                "rater": {
                    "provider": "local",
                    "task": "sentiment",
                    "batch_deployment": "rater-batch",
                    "prices": {
                        "input_per_million": 2.5,
                        "output_per_million": 10,
                        "batch_discount": 0.5,
                    },
                }
            },
        }
    )
    blobs = InMemoryBlobs()
    documents = InMemoryDocuments(blobs)
    jobs = JobRepository(DocumentJobStore(documents, "jobs"), clock=lambda: NOW)
    events, topic = RecordingPublisher(), RecordingSender()
    announcer = Announcer(events, topic)
    conclusion = Conclusion(
        records=BatchRecords(documents, blobs, "batches"),
        jobs=jobs,
        endings=JobEndings(jobs, announcer, lambda: NOW),
        announcer=announcer,
        requeue=RecordingSender(),
        policy=ConclusionPolicy(failed_lines="fail", max_resubmissions=2),
        catalog=models,
        clock=lambda: NOW,
    )
    request = RequestMessage(
        request_id="r1",
        tenant_id=TENANT,
        model="rater",
        input=InlineText(text="Fine."),
        mode=ProcessingMode.BATCH,
    )
    jobs.create(job_of(request, status=JobStatus.RUNNING))
    submission = Submission(
        id="s1",
        tenant_id=TENANT,
        deployment="rater-batch",
        model="rater",
        requests=1,
        bytes=100,
        created_at=NOW,
        updated_at=NOW,
        remote_status="completed",
    )

    concluded = conclusion.conclude(
        submission,
        MemberFacts(request=request, correlation_id="r1"),
        answer_line("r1", 1_000, 200),
    )

    assert concluded.outcome == "completed"
    result = jobs.get(TENANT, "r1").result
    assert result is not None
    # (1,000 x 2.5 + 200 x 10) / 1M = 0.0045 online, half of it on the batch lane
    assert result.cost == Cost(amount=Decimal("0.00225"), currency=USD)
    (event,) = events.published
    assert event.data["cost"] == {"amount": 0.00225, "currency": USD}
    (message,) = topic.sent
    assert json.loads(message.body)["cost"] == {"amount": 0.00225, "currency": USD}
