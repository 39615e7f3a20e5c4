"""Inference: what the app asks a model, what a model answers, and the catalog of models.

Models are scarce and slow, and each team brings its own: an Azure OpenAI deployment, a
model behind any OpenAI-compatible endpoint, a Python function. The processor does not
care which one runs. It hands a ``ModelClient`` an ``InferenceInput`` and gets back a
``ModelAnswer`` (the answer object the task's schema describes, with the call's token
usage), or an error of the one tree: ``TransientError`` (throttled, timed out: retry
later, honouring ``retry_after``), ``PermanentError`` (the request can never succeed) or
``PolicyRefusal`` (the model declined: a result).

The rest of this package is provider-free vocabulary: ``catalog`` (the aliases a
deployment serves, read from ``models.json``), ``prices`` (an alias's prices in it),
``tasks`` (instructions plus an output schema, and how an answer becomes a result),
``parameters`` (what a request may pass to its model), ``chat`` (the chat-completions
exchange as data) and ``served`` (an alias with the client that answers it). The
clients themselves are adapters (``shared.adapters.models``).

A Python handler (``provider: python``) is written against this module: it receives an
``InferenceInput`` and returns a mapping (the answer object) or a ``ModelAnswer``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from shared.contracts import DOCUMENT_ANALYSIS, Priority, TokenUsage


class InferenceInput(BaseModel):
    """What a model is asked: the verified input, decoded, and the caller's parameters."""

    model_config = ConfigDict(frozen=True)

    request_id: str
    model: str  # the alias the request named
    content: bytes
    media_type: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    attempt: int = 0
    task: str = DOCUMENT_ANALYSIS  # the alias's task (a handler may serve several)
    priority: Priority = Priority.NORMAL  # who goes first when the deployment's capacity is short
    tenant: str = ""  # whose share of the deployment the call takes (tenant_shares)
    # Seconds the call may wait for its deployment's capacity (its deadline); None: the
    # gate's own bound.
    wait_limit: float | None = None

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


@dataclass(frozen=True)
class ModelAnswer:
    """What a model answered: the answer object and the facts of the call.

    ``content`` is the JSON object the task's output schema describes (the task checks it).
    ``usage`` and ``finish_reason`` are the model's own report, None when it gave none
    (finish_reason ``length`` means the answer was cut short). ``statistics`` and
    ``details`` are facts about the input and the call that a model client adds (the
    built-in document analysis shows them in its result; other tasks keep their answer
    as the model gave it).
    """

    content: Mapping[str, Any]
    usage: TokenUsage | None = None
    finish_reason: str | None = None
    statistics: Mapping[str, float | int] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    # What the service says its deployment has left (x-ratelimit-remaining-*), if it says.
    remaining_tokens: int | None = None
    remaining_requests: int | None = None


class ModelClient(Protocol):
    @property
    def system(self) -> str:
        """Which model service answers (the OpenTelemetry GenAI ``gen_ai.system``, such as
        ``az.ai.openai``): telemetry splits latency and tokens by it, since one alias can
        mean different services in different environments."""
        ...

    def infer(self, request: InferenceInput) -> ModelAnswer:
        """Run the model; raise TransientError, PermanentError or PolicyRefusal. Fill the
        answer's ``usage`` and ``finish_reason`` when the model reports them."""
        ...


def reads_as_text(media_type: str) -> bool:
    """Whether a language model can read a document of this media type (as text)."""
    return media_type.startswith(("text/", "application/json"))
