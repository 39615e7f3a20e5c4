"""``provider: python``: a handler of the app's own, sync or async, answering an alias.

The handlers are those of ``tests.support.model_handlers``, served through the registry
as the app serves a catalog (``serve_catalog``), and called as the processor calls them.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.adapters.models import serve_catalog
from shared.adapters.models.python_handler import load_handler
from shared.contracts import TokenUsage
from shared.errors import InvalidModelOutput, PermanentError, TransientError
from shared.inference import InferenceInput, ModelAnswer
from shared.inference.served import ServedModel
from shared.settings import Settings
from tests.support import model_handlers
from tests.support.catalogs import catalog

OPEN = {"type": "object"}
SENTIMENT = model_handlers.SENTIMENT_SCHEMA
TOP = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"top": {"type": "integer", "minimum": 1, "maximum": 10}},
}


def serve(handler: str, schema: dict[str, Any] = OPEN, **entry: Any) -> ServedModel:
    document = {
        "tasks": {"t": {"instructions": "Answer.", "output_schema": schema}},
        "models": {"m": {"provider": "python", "task": "t", "handler": handler, **entry}},
    }
    return serve_catalog(catalog(document), Settings.model_validate({}))["m"]


def ask(served: ServedModel, text: str, attempt: int = 0, **parameters: Any) -> ModelAnswer:
    return served.client.infer(
        InferenceInput(
            request_id="r1",
            model="m",
            content=text.encode(),
            media_type="text/plain",
            parameters=parameters,
            attempt=attempt,
            task="t",
        )
    )


def test_a_sync_handler_answers_with_its_own_usage() -> None:
    served = serve("tests.support.model_handlers:sentiment", SENTIMENT)

    answer = ask(served, "Thanks, the service was great and I love it")

    assert served.card.task.result(answer) == {"sentiment": "positive", "score": 1.0}
    assert answer.usage == TokenUsage(input_tokens=9, output_tokens=2, total_tokens=11)
    assert answer.finish_reason == "stop"
    assert served.client.system == "inferbus.python"


def test_an_async_handler_runs_on_the_workers_loop_with_its_declared_parameters() -> None:
    served = serve("tests.support.model_handlers:keywords", parameters=TOP)

    answer = ask(served, "Invoices arrive monthly from suppliers", top=2)

    assert answer.content == {"keywords": ["suppliers", "Invoices"]}
    assert answer.usage is None, "a mapping answer reports no usage"
    assert ask(served, "alpha beta", top=1).content == {"keywords": ["alpha"]}


def test_a_class_handler_is_made_once_and_called_for_every_request() -> None:
    served = serve("tests.support.model_handlers:Echo")

    first = ask(served, "one", attempt=2)
    ask(served, "two")

    assert first.content == {"text": "one", "task": "t", "attempt": 2}
    handler = load_handler("tests.support.model_handlers:Echo")
    assert isinstance(handler, model_handlers.Echo)
    assert handler.calls >= 2
    assert model_handlers.IMPORTED["count"] == 1, "the module is imported once per process"


def test_the_error_tree_passes_through_and_any_other_exception_is_transient() -> None:
    served = serve("tests.support.model_handlers:failing")

    with pytest.raises(PermanentError, match="can never be answered"):
        ask(served, "permanent")
    with pytest.raises(TransientError) as transient:
        ask(served, "transient")
    assert transient.value.retry_after == 1.0
    with pytest.raises(TransientError) as bug:
        ask(served, "anything else")
    message = str(bug.value)
    assert message.startswith("handler tests.support.model_handlers:failing raised KeyError: ")
    assert "s3cr3t" not in message, "the exception's message is redacted"
    assert "sig=***" in message


@pytest.mark.parametrize(
    ("handler", "message"),
    [("not_a_mapping", "returned list, not a JSON object"), ("not_json", "not JSON")],
)
def test_an_answer_that_is_not_a_json_object_is_invalid_output(handler: str, message: str) -> None:
    with pytest.raises(InvalidModelOutput, match=message):
        ask(serve(f"tests.support.model_handlers:{handler}"), "x")


def test_an_answer_that_breaks_the_schema_is_invalid_output_of_the_task() -> None:
    served = serve("tests.support.model_handlers:off_schema", SENTIMENT)

    with pytest.raises(InvalidModelOutput) as invalid:
        served.card.task.result(ask(served, "x"))

    assert "result.score: 7 is greater than the maximum of 1" in str(invalid.value)
    assert "result.sentiment: 'ecstatic' is not one of" in str(invalid.value)


def test_parameters_outside_the_declaration_never_reach_the_handler() -> None:
    served = serve("tests.support.model_handlers:keywords", parameters=TOP)

    with pytest.raises(PermanentError, match=r"parameters\.top"):
        ask(served, "x", top=99)
