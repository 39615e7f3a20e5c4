"""Each alias's parameters, declared once: intake refuses what breaks them (422, or 413 for
size) and the model clients read them, so the processor never sees one unchecked."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from shared.adapters.in_memory import InMemoryBlobs
from shared.adapters.models.local import LocalModel
from shared.contracts import InlineText, RequestMessage
from shared.errors import InvalidInput, InvalidParameters, PayloadTooLarge, PermanentError
from shared.inference import InferenceInput
from shared.inference.catalog import ModelCatalog
from shared.inference.parameters import GENERATION_PARAMETERS, MAX_PARAMETERS_BYTES
from shared.intake.claim_checks import ClaimChecks
from shared.intake.request_rules import RequestRules
from tests.support.catalogs import catalog, local_catalog

TEXT = "One. Two sentences here. Three sentences now. Four sentences in all."
LABELS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "labels": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        "temperature": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["labels"],
}
CLASSIFIER = catalog(
    {
        "tasks": {
            "classify": {
                "instructions": "Pick one label.",
                "output_schema": {"type": "object", "properties": {"label": {"type": "string"}}},
            }
        },
        "models": {
            "local-analyzer": {"provider": "local"},
            "classifier": {"provider": "python", "task": "classify", "handler": "m:f",
                           "parameters": LABELS},
        },
    }
)  # fmt: skip


def rules(models: ModelCatalog | None = None, **changes: Any) -> RequestRules:
    return RequestRules(models or local_catalog(), 3600, 86_400, **changes)


def fields(error: pytest.ExceptionInfo[Exception]) -> set[str]:
    return {f.field for f in getattr(error.value, "fields", ())}


@pytest.mark.parametrize(
    ("parameters", "field"),
    [
        ({"summary_sentences": "x"}, "parameters.summary_sentences"),
        ({"summary_sentences": 0}, "parameters.summary_sentences"),
        ({"summary_sentences": 11}, "parameters.summary_sentences"),
        ({"temperature": -0.1}, "parameters.temperature"),
        ({"temperature": "hot"}, "parameters.temperature"),
        ({"top_p": 0}, "parameters.top_p"),
        ({"max_tokens": 10**9}, "parameters.max_tokens"),
        ({"unknown": 1}, "parameters.unknown"),
        ({"nested": {"a": {"b": 1}}}, "parameters.nested"),
    ],
)
def test_parameters_that_break_the_declaration_are_refused_naming_the_field(
    parameters: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidParameters) as refused:
        rules().check_parameters(parameters, "local-analyzer")
    assert field in fields(refused)
    assert "model 'local-analyzer'" in str(refused.value)


def test_fault_injection_is_a_parameter_only_where_enabled_and_then_checked() -> None:
    with pytest.raises(InvalidParameters, match="not enabled") as refused:
        rules().check_parameters({"simulate": {"permanent": True}}, "local-analyzer")
    assert fields(refused) == {"parameters.simulate"}
    enabled = rules(simulated_faults=True)
    checked = enabled.check_parameters({"simulate": {"transient_attempts": 2}}, "local-analyzer")
    assert checked == {"simulate": {"transient_attempts": 2}}
    with pytest.raises(InvalidParameters) as bad:
        enabled.check_parameters(
            {"simulate": {"transient_attempts": "many", "x": 1}}, "local-analyzer"
        )
    assert fields(bad) == {"parameters.simulate.transient_attempts", "parameters.simulate.x"}


def test_the_declaration_follows_the_alias() -> None:
    classifier = rules(CLASSIFIER)
    given = {"labels": ["spam", "ham"], "temperature": 0.5}
    assert classifier.check_parameters(given, "classifier") == given
    with pytest.raises(InvalidParameters) as refused:
        classifier.check_parameters({"labels": "spam", "summary_sentences": 2}, "classifier")
    assert fields(refused) == {"parameters", "parameters.labels"}
    assert "model 'classifier'" in str(refused.value)
    with pytest.raises(InvalidParameters) as missing:
        classifier.check_parameters({}, "classifier")
    assert fields(missing) == {"parameters"}, "a required parameter is named by its object"
    assert "'labels' is a required property" in str(missing.value)
    # The other alias of the same catalog keeps the generation parameters.
    assert classifier.check_parameters({"summary_sentences": "3"}, "local-analyzer") == {
        "summary_sentences": 3
    }


def test_too_many_or_too_large_parameters_are_refused_before_validation() -> None:
    with pytest.raises(InvalidInput, match="at most 32 entries"):
        rules().check_parameters({f"p{i}": i for i in range(33)}, "local-analyzer")
    with pytest.raises(PayloadTooLarge, match=f"the limit is {MAX_PARAMETERS_BYTES}") as big:
        rules().check_parameters({"notes": "p" * 270_000}, "local-analyzer")
    assert fields(big) == {"parameters"}


def test_metadata_and_parameters_are_bounded_by_the_message_size() -> None:
    RequestRules.check_message_size({"a": "x" * 1000}, {"k": "v"})
    with pytest.raises(PayloadTooLarge, match="a queue message is at most 262144"):
        RequestRules.check_message_size({"a": "x" * 250_000}, {})


def infer(parameters: dict[str, Any]) -> Any:
    return LocalModel().infer(
        InferenceInput(
            request_id="r",
            model="local-analyzer",
            content=TEXT.encode(),
            media_type="text/plain",
            parameters=parameters,
        )
    )


def test_the_local_model_reads_its_declared_parameters() -> None:
    assert infer({"summary_sentences": 1}).content["summary"].count(".") == 1
    assert infer({"summary_sentences": 3}).content["summary"].count(".") == 3
    sampled = infer({"temperature": 1.5})
    assert sampled.content["summary"] == infer({}).content["summary"]  # sampling is ignored


def test_an_unchecked_bad_parameter_fails_permanently_instead_of_crashing() -> None:
    with pytest.raises(PermanentError, match="summary_sentences"):
        infer({"summary_sentences": "x"})


def test_declared_parameters_check_as_given_and_read_with_defaults() -> None:
    assert GENERATION_PARAMETERS.check({"summary_sentences": "4"}, "m") == {"summary_sentences": 4}
    assert GENERATION_PARAMETERS.read({"summary_sentences": "4"}, "m") == {
        "summary_sentences": 4
    }, "no sampling setting the request did not give (reasoning models refuse a temperature)"


def test_a_producers_message_meets_the_same_declaration() -> None:
    message = RequestMessage(
        request_id="r1",
        tenant_id="contoso",
        model="local-analyzer",
        input=InlineText(text="hello"),
        parameters={"summary_sentences": "x"},
    )
    claim_checks = ClaimChecks(InMemoryBlobs(), "inputs", ("inputs",), 10_000)
    with pytest.raises(InvalidParameters) as refused:
        rules(producer_tenants=("contoso",)).check_message(message, datetime.now(UTC), claim_checks)
    assert fields(refused) == {"parameters.summary_sentences"}
