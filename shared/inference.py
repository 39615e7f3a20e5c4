"""The ModelClient port and the result every model produces.

Models are scarce and slow; the processor does not care which one runs, only that it
answers with an ``InferenceResult`` or raises from the error tree: ``TransientError``
(throttled, timed out: retry later, honouring ``retry_after``), ``PermanentError`` (the
request can never succeed) or ``PolicyRefusal`` (the model declined: a result).
"""

from __future__ import annotations

from typing import Any, Final, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from shared.contracts import Priority

RESULT_SCHEMA: Final = "inferbus.result/v1"


class InferenceInput(BaseModel):
    """What a model is asked: the verified input, decoded, and the caller's parameters."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    model: str
    content: bytes
    media_type: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    attempt: int = 0

    def text(self) -> str:
        """The content as text (undecodable bytes replaced rather than failing)."""
        charset = "utf-8"
        for part in self.media_type.split(";")[1:]:
            name, _, value = part.strip().partition("=")
            if name.lower() == "charset" and value:
                charset = value.strip('"')
        try:
            return self.content.decode(charset, errors="replace")
        except LookupError:
            return self.content.decode("utf-8", errors="replace")


class InferenceResult(BaseModel):
    """One model's answer, in the shape every model client returns."""

    model_config = ConfigDict(extra="forbid")

    summary: str
    document_type: str
    confidence: float = Field(ge=0, le=1)
    language: str | None = None
    review_required: bool = False
    suggested_priority: Priority = Priority.NORMAL
    statistics: dict[str, float | int] = Field(default_factory=dict)
    details: dict[str, Any] = Field(default_factory=dict)


class ResultDocument(BaseModel):
    """What is stored at ``results/<tenant>/<request_id>.json`` and served to callers."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    schema_: Literal["inferbus.result/v1"] = Field(RESULT_SCHEMA, alias="schema")
    request_id: str
    tenant_id: str
    model: str
    outcome: Literal["completed", "refused"]
    result: InferenceResult | None = None
    refusal: dict[str, str] | None = None
    completed_at: str


class ModelClient(Protocol):
    def infer(self, request: InferenceInput) -> InferenceResult:
        """Run the model; raise TransientError, PermanentError or PolicyRefusal."""
        ...
