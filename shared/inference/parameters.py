"""The parameters each model takes, declared once: intake checks them, model clients read them.

A request's ``parameters`` used to be a free object that only the model client looked
at, so ``{"summary_sentences": "x"}`` was accepted with 202 and then crashed the
processor on every delivery. Each alias of the catalog now declares its parameters: by
default the generation parameters below (``GenerationParameters`` for the built-in
document analysis, ``SamplingParameters`` for a catalog's own task: unknown fields
forbidden, numbers bounded), or the JSON Schema of its ``parameters`` entry (an object
schema that closes its properties). Every door checks a request's parameters against its
alias's declaration (HTTP answers 422 naming the fields), and the model clients read the
same declaration, so the processor never acts on a parameter nobody checked.

Whatever the declaration, parameters travel in every request message: at most
``MAX_PARAMETERS`` entries and ``MAX_PARAMETERS_BYTES`` of JSON (``check_size``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.errors import FieldError, InvalidInput, InvalidParameters, PayloadTooLarge
from shared.inference.json_schemas import CompiledSchema, summarized

# At most this many top-level parameters, and this many bytes of them as compact JSON:
# parameters travel in every request message, whose broker limit is 256 KB.
MAX_PARAMETERS: Final = 32
MAX_PARAMETERS_BYTES: Final = 16_384
# Parameters a chat-completions endpoint takes (OpenAI's names, which every
# OpenAI-compatible endpoint shares): they go into the request body, not the prompt;
# ``max_tokens`` under the field its provider names (``shared.inference.chat``).
SAMPLING_PARAMETERS: Final = (
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "stop",
    "presence_penalty",
    "frequency_penalty",
)


class ModelParameters(BaseModel):
    """Base of the declared parameters: unknown fields are an error, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SamplingParameters(ModelParameters):
    """What a model of a catalog task takes unless its entry declares otherwise: the
    sampling settings.

    None has a default of its own: a setting the request leaves out stays out of the
    request body, so the model's own default applies. Reasoning models (gpt-5, o1, o3,
    o4) refuse any temperature but their default with a 400, so a default temperature
    sent on every call would make them unusable; a caller who wants repeatable answers
    from a model that takes one asks for ``temperature`` 0 itself."""

    temperature: float | None = Field(None, ge=0, le=2, description="sampling temperature")
    top_p: float | None = Field(None, gt=0, le=1, description="nucleus sampling mass")
    max_tokens: int | None = Field(
        None, ge=1, le=16_384, description="the longest answer, in tokens"
    )


class GenerationParameters(SamplingParameters):
    """What a document-analysis model takes unless its entry declares otherwise: the
    sampling settings and the summary's length."""

    summary_sentences: int = Field(2, ge=1, le=10, description="sentences in the summary (at most)")


class ParameterDeclaration(Protocol):
    """What one alias accepts in ``parameters``."""

    @property
    def name(self) -> str:
        """The declaration's name in the OpenAPI document's components."""
        ...

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema of the accepted parameters (the OpenAPI document shows it)."""
        ...

    def check(self, parameters: Mapping[str, Any], model: str) -> dict[str, Any]:
        """The parameters as a request message carries them (as given, with values of the
        declared types), or InvalidParameters naming every failing field
        (``parameters.<name>``)."""
        ...

    def read(self, parameters: Mapping[str, Any], model: str) -> dict[str, Any]:
        """The parameters as the model receives them: checked, declared defaults filled."""
        ...


def invalid_parameters(model: str, fields: tuple[FieldError, ...]) -> InvalidParameters:
    """The 422 of parameters that break their declaration, naming the first fields."""
    return InvalidParameters(
        f"parameters are invalid for model '{model}': {summarized(fields)}", fields
    )


class DeclaredParameters:
    """Parameters declared by a pydantic model (the default: ``GenerationParameters``)."""

    def __init__(self, declaration: type[ModelParameters]) -> None:
        self._declaration = declaration

    @property
    def name(self) -> str:
        return self._declaration.__name__

    def json_schema(self) -> dict[str, Any]:
        return self._declaration.model_json_schema()

    def typed(self, parameters: Mapping[str, Any], model: str) -> ModelParameters:
        """The parameters as the pydantic declaration reads them."""
        try:
            return self._declaration.model_validate(dict(parameters))
        except ValidationError as error:
            fields = tuple(
                FieldError(
                    ".".join(("parameters", *(str(part) for part in item["loc"]))), item["msg"]
                )
                for item in error.errors()
            )
            raise invalid_parameters(model, fields) from None

    def check(self, parameters: Mapping[str, Any], model: str) -> dict[str, Any]:
        return self.typed(parameters, model).model_dump(mode="json", exclude_unset=True)

    def read(self, parameters: Mapping[str, Any], model: str) -> dict[str, Any]:
        return self.typed(parameters, model).model_dump(mode="json", exclude_none=True)


class SchemaParameters:
    """Parameters declared by a JSON Schema (a catalog entry's ``parameters``)."""

    def __init__(self, name: str, schema: Mapping[str, Any]) -> None:
        self._name = name
        self._schema = CompiledSchema(schema)

    @property
    def name(self) -> str:
        return self._name

    def json_schema(self) -> dict[str, Any]:
        copied: dict[str, Any] = json.loads(json.dumps(self._schema.schema))
        return copied  # a copy the caller may change

    def check(self, parameters: Mapping[str, Any], model: str) -> dict[str, Any]:
        given = dict(parameters)
        if problems := self._schema.problems(given, "parameters"):
            raise invalid_parameters(model, problems)
        return given

    def read(self, parameters: Mapping[str, Any], model: str) -> dict[str, Any]:
        return self.check(parameters, model)


GENERATION_PARAMETERS: Final = DeclaredParameters(GenerationParameters)
SAMPLING_PARAMETERS_ONLY: Final = DeclaredParameters(SamplingParameters)


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
