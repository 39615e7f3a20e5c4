"""The ModelClient port and the result every model produces.

Models are scarce and slow; the processor does not care which one runs, only that it
answers with an ``InferenceResult`` or raises from the error tree: ``TransientError``
(throttled, timed out: retry later, honouring ``retry_after``), ``PermanentError`` (the
request can never succeed) or ``PolicyRefusal`` (the model declined: a result).
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from shared.contracts import InferenceResult


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


class ModelClient(Protocol):
    @property
    def system(self) -> str:
        """Which model service answers (the OpenTelemetry GenAI ``gen_ai.system``, such as
        ``az.ai.openai``): telemetry splits latency and tokens by it, since one deployment
        name can mean different services in different environments."""
        ...

    def infer(self, request: InferenceInput) -> InferenceResult:
        """Run the model; raise TransientError, PermanentError or PolicyRefusal. Fill the
        result's ``usage`` and ``finish_reason`` when the model reports them."""
        ...
