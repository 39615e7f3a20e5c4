"""Each model's parameters, declared once: intake refuses what breaks them (422, or 413 for
size) and the model clients read them typed, so the processor never sees one unchecked."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from shared.adapters.in_memory import InMemoryBlobs
from shared.adapters.local_model import LocalModel
from shared.contracts import InlineText, RequestMessage
from shared.errors import (
    InvalidInput,
    InvalidParameters,
    PayloadTooLarge,
    PermanentError,
    TransientError,
)
from shared.inference import InferenceInput
from shared.intake.claim_checks import ClaimChecks
from shared.intake.request_rules import RequestRules
from shared.model_parameters import (
    MAX_PARAMETERS_BYTES,
    AzureOpenAIParameters,
    LocalAnalyzerParameters,
    parse_parameters,
)

TEXT = "One. Two sentences here. Three sentences now. Four sentences in all."


def rules(**changes: Any) -> RequestRules:
    return RequestRules(("local-analyzer",), 3600, 86_400, **changes)


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
        rules().check_parameters({"simulate": {"permanent": True}})
    assert fields(refused) == {"parameters.simulate"}
    enabled = rules(simulated_faults=True)
    typed = enabled.check_parameters({"simulate": {"transient_attempts": 2}})
    assert isinstance(typed, LocalAnalyzerParameters)
    assert typed.simulate is not None
    assert typed.simulate.transient_attempts == 2
    with pytest.raises(InvalidParameters) as bad:
        enabled.check_parameters({"simulate": {"transient_attempts": "many", "x": 1}})
    assert fields(bad) == {"parameters.simulate.transient_attempts", "parameters.simulate.x"}


def test_the_declaration_follows_the_provider() -> None:
    hosted = rules(model_provider="azure_openai", simulated_faults=True)
    typed = hosted.check_parameters({"temperature": 0.7, "max_tokens": 200}, "gpt-4o")
    assert isinstance(typed, AzureOpenAIParameters)
    assert (typed.temperature, typed.max_tokens, typed.summary_sentences) == (0.7, 200, 2)
    with pytest.raises(InvalidParameters):
        hosted.check_parameters({"simulate": {}}, "gpt-4o")


def test_too_many_or_too_large_parameters_are_refused_before_validation() -> None:
    with pytest.raises(InvalidInput, match="at most 32 entries"):
        rules().check_parameters({f"p{i}": i for i in range(33)})
    with pytest.raises(PayloadTooLarge, match=f"the limit is {MAX_PARAMETERS_BYTES}") as big:
        rules().check_parameters({"notes": "p" * 270_000})
    assert fields(big) == {"parameters"}


def test_metadata_and_parameters_are_bounded_by_the_message_size() -> None:
    RequestRules.check_message_size({"a": "x" * 1000}, {"k": "v"})
    with pytest.raises(PayloadTooLarge, match="a queue message is at most 262144"):
        RequestRules.check_message_size({"a": "x" * 250_000}, {})


def infer(parameters: dict[str, Any], *, faults: bool = False, attempt: int = 0) -> Any:
    return LocalModel(simulate_on_request=faults).infer(
        InferenceInput(
            request_id="r",
            model="local-analyzer",
            content=TEXT.encode(),
            media_type="text/plain",
            parameters=parameters,
            attempt=attempt,
        )
    )


def test_the_local_model_reads_its_typed_parameters() -> None:
    assert infer({"summary_sentences": 1}).summary.count(".") == 1
    assert infer({"summary_sentences": 3}).summary.count(".") == 3
    assert infer({"temperature": 1.5}).summary == infer({}).summary  # sampling is ignored


def test_an_unchecked_bad_parameter_fails_permanently_instead_of_crashing() -> None:
    with pytest.raises(PermanentError, match="summary_sentences"):
        infer({"summary_sentences": "x"})
    with pytest.raises(TransientError):
        infer({"simulate": {"transient_attempts": 1, "retry_after": 2}}, faults=True)
    assert infer({"simulate": {"transient_attempts": 1}}, faults=True, attempt=1).summary


def test_typed_parameters_parse_directly() -> None:
    typed = parse_parameters(LocalAnalyzerParameters, {"summary_sentences": "4"}, "m")
    assert typed.summary_sentences == 4
    assert typed.model_dump(exclude_unset=True) == {"summary_sentences": 4}


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
        rules().check_message(message, datetime.now(UTC), claim_checks)
    assert fields(refused) == {"parameters.summary_sentences"}
