"""The parameters each model takes, declared once: intake checks them, model clients read them.

A request's ``parameters`` used to be a free object that only the model client looked
at, so ``{"summary_sentences": "x"}`` was accepted with 202 and then crashed the
processor on every delivery. Each model now declares its parameters as a pydantic model
(unknown fields forbidden, numbers bounded, strings and lists limited). Every door checks
a request's parameters against its model's declaration through
``RequestRules.check_parameters`` (HTTP answers 422 naming the fields), and the model
clients read the same typed object (``LocalAnalyzerParameters``, ``AzureOpenAIParameters``),
so the processor never acts on a parameter nobody checked.

Which declaration applies follows the model that serves the request: every model in
AllowedModels is served by the configured ``ModelProvider`` (the local analyzer, or the
Azure OpenAI deployment of that name). The local analyzer, a stand-in for the hosted
model, accepts the hosted model's parameters too (and ignores the sampling ones), so a
client written against the local stack works unchanged against Azure OpenAI.

No SDK is imported here: this is domain vocabulary, shared by intake, the model clients
and the OpenAPI document.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.errors import FieldError, InvalidInput, InvalidParameters, PayloadTooLarge

# At most this many top-level parameters, and this many bytes of them as compact JSON:
# parameters travel in every request message, whose broker limit is 256 KB.
MAX_PARAMETERS: Final = 32
MAX_PARAMETERS_BYTES: Final = 16_384

ModelProvider = Literal["local", "azure_openai"]


class ModelParameters(BaseModel):
    """Base of every model's parameters: unknown fields are an error, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SimulatedFaults(ModelParameters):
    """``parameters.simulate``: faults the local analyzer injects (development stack only,
    where LocalModelFaults is on; anywhere else intake refuses the field)."""

    transient_attempts: int = Field(
        0, ge=0, le=20, description="fail this many attempts with a transient error first"
    )
    retry_after: float | None = Field(
        None, ge=0, le=3600, description="the Retry-After seconds the simulated throttling asks"
    )
    always_transient: bool = Field(False, description="fail every attempt transiently")
    permanent: bool = Field(False, description="fail permanently (dead-letter)")


class GenerationParameters(ModelParameters):
    """What every model takes: the summary's length and the sampling settings."""

    summary_sentences: int = Field(2, ge=1, le=10, description="sentences in the summary (at most)")
    temperature: float = Field(0.0, ge=0, le=2, description="sampling temperature")
    top_p: float | None = Field(None, gt=0, le=1, description="nucleus sampling mass")
    max_tokens: int | None = Field(
        None, ge=1, le=16_384, description="the longest answer, in tokens"
    )


class AzureOpenAIParameters(GenerationParameters):
    """Parameters of an Azure OpenAI deployment (``ModelProvider=azure_openai``)."""


class LocalAnalyzerParameters(GenerationParameters):
    """Parameters of the local analyzer (``ModelProvider=local``); it honours
    ``summary_sentences`` and ``simulate`` and ignores the sampling settings."""

    simulate: SimulatedFaults | None = None


PARAMETERS_BY_PROVIDER: Final[dict[str, type[ModelParameters]]] = {
    "local": LocalAnalyzerParameters,
    "azure_openai": AzureOpenAIParameters,
}


def parameters_model_for(provider: str) -> type[ModelParameters]:
    """The parameters declaration of the models a provider serves."""
    return PARAMETERS_BY_PROVIDER[provider]


def _field_errors(error: ValidationError) -> tuple[FieldError, ...]:
    return tuple(
        FieldError(".".join(("parameters", *(str(part) for part in item["loc"]))), item["msg"])
        for item in error.errors()
    )


def check_size(parameters: Mapping[str, Any]) -> None:
    """Parameters small enough to travel in a request message; PayloadTooLarge otherwise."""
    if len(parameters) > MAX_PARAMETERS:
        raise InvalidInput(
            f"parameters may have at most {MAX_PARAMETERS} entries",
            (FieldError("parameters", "too many entries"),),
        )
    size = len(json.dumps(parameters, separators=(",", ":"), default=str).encode("utf-8"))
    if size > MAX_PARAMETERS_BYTES:
        raise PayloadTooLarge(
            f"parameters are {size} bytes as JSON; the limit is {MAX_PARAMETERS_BYTES}",
            (FieldError("parameters", "too large"),),
        )


def parse_parameters[P: ModelParameters](
    declaration: type[P], parameters: Mapping[str, Any], model: str
) -> P:
    """The typed parameters, or InvalidParameters naming every failing field
    (``parameters.<name>``)."""
    try:
        return declaration.model_validate(dict(parameters))
    except ValidationError as error:
        fields = _field_errors(error)
        summary = "; ".join(f"{f.field}: {f.message}" for f in fields[:5])
        raise InvalidParameters(
            f"parameters are invalid for model '{model}': {summary}", fields
        ) from None
