"""Tasks: what a model is asked to do, and how its answer becomes a request's result.

A task is instructions (the system prompt) plus the JSON Schema of the answer object.
The catalog declares them (``models.json``: ``tasks``); every alias runs one. The
built-in ``document-analysis`` keeps the result shape the API has always had
(``InferenceResult``: summary, document type, confidence, ...); any other task's result is
the model's answer object itself, checked against the task's output schema. An answer
that breaks it is an ``InvalidModelOutput``: models are stochastic, so the request is
tried again a few times before its job fails with that code (``processing.pipeline``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Protocol

from pydantic import ValidationError

from shared.contracts import DOCUMENT_ANALYSIS, InferenceResult
from shared.errors import InvalidModelOutput
from shared.inference import ModelAnswer
from shared.inference.json_schemas import CompiledSchema, summarized
from shared.inference.parameters import SAMPLING_PARAMETERS


class Task(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def output_schema(self) -> Mapping[str, Any]:
        """The JSON Schema of the answer object the model is asked for."""
        ...

    @property
    def instructions_describe_answer(self) -> bool:
        """Whether the instructions already spell out the answer's keys (else a model
        asked for any JSON object is also shown the schema)."""
        ...

    def instructions(self, parameters: Mapping[str, Any]) -> str:
        """The system prompt, for these (declared and checked) parameters."""
        ...

    def result(self, answer: ModelAnswer) -> InferenceResult | dict[str, Any]:
        """The request's result; InvalidModelOutput when the answer is not what the task
        asked for."""
        ...


DOCUMENT_TYPES: Final = (
    "invoice",
    "contract",
    "resume",
    "support_ticket",
    "report",
    "email",
    "other",
)
ANALYSIS_PROMPT: Final = (
    "You analyse one document for a processing pipeline. Answer with a JSON object only, "
    'with keys: "summary" ({sentences} at most), "document_type" (one of '
    + ", ".join(DOCUMENT_TYPES)
    + '), "confidence" (0 to 1), "language" (ISO 639-1 code), "review_required" (true when '
    'a human should check it), "suggested_priority" (low, normal or high).'
)
ANALYSIS_SCHEMA: Final[Mapping[str, Any]] = {
    "type": "object",
    "additionalProperties": False,
    "required": [
        "summary",
        "document_type",
        "confidence",
        "language",
        "review_required",
        "suggested_priority",
    ],
    "properties": {
        "summary": {"type": "string"},
        "document_type": {"type": "string", "enum": list(DOCUMENT_TYPES)},
        "confidence": {"type": "number"},
        "language": {"type": ["string", "null"]},
        "review_required": {"type": "boolean"},
        "suggested_priority": {"type": "string", "enum": ["low", "normal", "high"]},
    },
}


class DocumentAnalysis:
    """The built-in task: an analysis of one document, as ``InferenceResult``."""

    name = DOCUMENT_ANALYSIS
    output_schema = ANALYSIS_SCHEMA
    instructions_describe_answer = True

    def instructions(self, parameters: Mapping[str, Any]) -> str:
        count = parameters.get("summary_sentences", 2)
        sentences = "one sentence" if count == 1 else f"{count} sentences"
        return ANALYSIS_PROMPT.format(sentences=sentences)

    def result(self, answer: ModelAnswer) -> InferenceResult:
        fields = InferenceResult.model_fields
        try:
            return InferenceResult.model_validate(
                {
                    **{k: v for k, v in answer.content.items() if k in fields},
                    "statistics": dict(answer.statistics),
                    "details": dict(answer.details),
                    # Last, so that keys of the model's own JSON cannot stand in for them.
                    "usage": answer.usage,
                    "finish_reason": answer.finish_reason,
                }
            )
        except ValidationError as error:
            problems = "; ".join(
                f"result.{'.'.join(map(str, item['loc']))}: {item['msg']}"
                for item in error.errors()[:5]
            )
            raise InvalidModelOutput(
                f"the model's answer is not a document analysis: {problems}"
            ) from None


class SchemaTask:
    """A task of the catalog: its instructions, and its answer checked against its schema."""

    instructions_describe_answer = False

    def __init__(self, name: str, instructions: str, output_schema: Mapping[str, Any]) -> None:
        self.name = name
        self._instructions = instructions
        self._schema = CompiledSchema(output_schema)
        self.output_schema = output_schema

    def instructions(self, parameters: Mapping[str, Any]) -> str:
        """The task's instructions; a request's own parameters (other than the sampling
        settings, which go in the request body) follow them as JSON, so a task can be
        steered per request (labels to choose from, a target language...)."""
        own = {k: v for k, v in parameters.items() if k not in SAMPLING_PARAMETERS}
        if not own:
            return self._instructions
        context = json.dumps(own, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return f"{self._instructions}\n\nParameters of this request (JSON): {context}"

    def result(self, answer: ModelAnswer) -> dict[str, Any]:
        content = dict(answer.content)
        if problems := self._schema.problems(content, "result"):
            raise InvalidModelOutput(
                f"the model's answer does not match the output schema of task "
                f"'{self.name}': {summarized(problems)}"
            )
        return content


BUILTIN_TASKS: Final[Mapping[str, Task]] = {DOCUMENT_ANALYSIS: DocumentAnalysis()}
