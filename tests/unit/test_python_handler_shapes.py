"""``provider: python``: what a handler returns is checked where it becomes the app's answer.

The handlers are those of ``tests.support.shape_handlers``: right answer objects, reported
in the wrong shape. Usage as a plain dict with the app's own keys is taken (there is one
way to read it); any other shape is the handler's failure, a ``TransientError`` naming
the handler and what is wrong, so that its message is retried with backoff instead of
crashing past the capacity gate and being abandoned.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.in_memory import RecordingSettler
from shared.adapters.models import serve_catalog
from shared.contracts import TokenUsage
from shared.errors import InvalidModelOutput, TransientError
from shared.inference import InferenceInput, ModelAnswer
from shared.inference.served import ServedModel
from shared.lanes import Lane
from shared.settings import Settings
from tests.support.catalogs import catalog
from tests.support.model_handlers import SENTIMENT_SCHEMA
from tests.support.wiring import Wired, api_request, wire

HANDLERS = "tests.support.shape_handlers"
TENANT = "contoso"
TASKS = {"sentiment": {"instructions": "Rate it.", "output_schema": SENTIMENT_SCHEMA}}


def entry(handler: str) -> dict[str, Any]:
    return {"provider": "python", "task": "sentiment", "handler": f"{HANDLERS}:{handler}"}


def serve(handler: str) -> ServedModel:
    document = {"tasks": TASKS, "models": {"m": entry(handler)}}
    return serve_catalog(catalog(document), Settings.model_validate({}))["m"]


def ask(served: ServedModel) -> ModelAnswer:
    return served.client.infer(
        InferenceInput(
            request_id="r1",
            model="m",
            content=b"It came on time.",
            media_type="text/plain",
            task="sentiment",
        )
    )


# --- usage as a plain dict --------------------------------------------------------------


def test_usage_as_a_dict_of_the_apps_own_keys_is_taken_with_its_total() -> None:
    answer = ask(serve("usage_as_dict"))

    assert answer.usage == TokenUsage(input_tokens=4, output_tokens=2, total_tokens=6)
    assert answer.content == {"sentiment": "neutral", "score": 0.0}


def test_a_total_the_handler_gives_is_kept() -> None:
    answer = ask(serve("usage_as_full_dict"))

    assert answer.usage == TokenUsage(input_tokens=4, output_tokens=2, total_tokens=7)


@pytest.mark.parametrize(
    ("handler", "reasons"),
    [
        (
            "usage_in_openai_words",
            [
                "usage.input_tokens: Field required",
                "usage.prompt_tokens: Extra inputs are not permitted",
            ],
        ),
        (
            "usage_of_wrong_types",
            [
                "usage.input_tokens: Input should be a valid integer",
                "usage.output_tokens: Input should be greater than or equal to 0",
            ],
        ),
        ("usage_as_number", ["an answer whose usage is int, not a TokenUsage"]),
    ],
)
def test_usage_of_another_shape_is_the_handlers_transient_failure(
    handler: str, reasons: list[str]
) -> None:
    with pytest.raises(TransientError) as failed:
        ask(serve(handler))

    message = str(failed.value)
    assert message.startswith(f"handler {HANDLERS}:{handler} returned "), message
    assert all(reason in message for reason in reasons), message
    assert not isinstance(failed.value, InvalidModelOutput), "the answer itself was right"


# --- the answer and the call's other facts ----------------------------------------------


@pytest.mark.parametrize(
    ("handler", "reason"),
    [
        ("no_answer", "returned NoneType, not a JSON object"),
        ("answer_of_none", "returned NoneType, not a JSON object"),
    ],
)
def test_a_missing_answer_is_invalid_output_retried_as_a_transient_failure(
    handler: str, reason: str
) -> None:
    with pytest.raises(InvalidModelOutput, match=reason):
        ask(serve(handler))


@pytest.mark.parametrize(
    ("handler", "reason"),
    [
        ("finish_reason_as_number", "finish_reason is int, not a string"),
        ("statistics_as_none", "statistics is NoneType, not a mapping of names to numbers"),
        ("remaining_as_text", "remaining_tokens is str, not a count"),
    ],
)
def test_facts_of_the_call_of_the_wrong_type_are_the_handlers_failure(
    handler: str, reason: str
) -> None:
    with pytest.raises(TransientError) as failed:
        ask(serve(handler))

    assert str(failed.value) == f"handler {HANDLERS}:{handler} returned an answer whose {reason}"


# --- through the processor: behind the capacity gate, retried with backoff --------------


def catalog_app(tmp_path: Path) -> Wired:
    path = tmp_path / "models.json"
    models = {name: entry(name) for name in ("usage_as_dict", "usage_as_number")}
    path.write_text(json.dumps({"tasks": TASKS, "models": models}))
    return wire(ModelCatalog=str(path))


def run_once(wired: Wired, alias: str) -> tuple[str, str]:
    """(the outcome of the message's first delivery, its job id)."""
    submitted = wired.call(
        wired.http.requests.submit,
        api_request(
            "POST",
            "/v1/requests",
            body={"model": alias, "input": {"text": "It came on time."}},
            tenant=TENANT,
        ),
    )
    assert submitted.status == 202, submitted.body
    job_id = json.loads(submitted.body)["id"]
    (message,) = [m for m in wired.queue.sent if m.message_id == job_id]
    processor = wired.services.lanes[Lane.STANDARD].processor
    return processor.process(wired.deliver(message), RecordingSettler()), job_id


def test_a_handlers_wrong_usage_is_retried_with_backoff_not_abandoned(tmp_path: Path) -> None:
    wired = catalog_app(tmp_path)

    outcome, job_id = run_once(wired, "usage_as_number")

    assert outcome == "retry-scheduled"
    (copy,) = [m for m in wired.queue.sent if m.message_id == f"{job_id}:retry:1"]
    assert copy.scheduled_enqueue_time is not None, "the copy waits its backoff"
    job = wired.services.jobs.get(TENANT, job_id)
    assert job.last_error is not None
    assert job.last_error.code == "transient"
    assert "usage is int, not a TokenUsage" in job.last_error.message


def test_a_handlers_usage_dict_passes_the_capacity_gate_into_the_result(tmp_path: Path) -> None:
    wired = catalog_app(tmp_path)

    outcome, job_id = run_once(wired, "usage_as_dict")

    assert outcome == "completed"
    result = wired.services.jobs.get(TENANT, job_id).result
    assert result is not None
    assert result.usage == TokenUsage(input_tokens=4, output_tokens=2, total_tokens=6)
