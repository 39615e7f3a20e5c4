"""Python handlers (``provider: python``) that answer in the wrong shape, for the tests.

Each is named in a catalog as ``tests.support.shape_handlers:<name>``. Their answer objects
are right (a sentiment); what is wrong is how they report it: usage as a plain dict (a
valid one, an OpenAI-shaped one, one of the wrong types), usage of no usable type, no
answer at all, or facts of the call of the wrong type.
"""

from __future__ import annotations

from typing import Any

from shared.inference import InferenceInput, ModelAnswer

ANSWER: dict[str, Any] = {"sentiment": "neutral", "score": 0.0}


def _answer(**facts: Any) -> ModelAnswer:
    """A ``ModelAnswer`` with ``facts`` as the handler gave them (unchecked, as at runtime)."""
    return ModelAnswer(content=dict(ANSWER), **facts)


def usage_as_dict(request: InferenceInput) -> ModelAnswer:
    """Usage as a plain dict with TokenUsage's own keys, total left out."""
    return _answer(usage={"input_tokens": 4, "output_tokens": 2})


def usage_as_full_dict(request: InferenceInput) -> ModelAnswer:
    """Usage as a plain dict with all three of TokenUsage's keys."""
    return _answer(usage={"input_tokens": 4, "output_tokens": 2, "total_tokens": 7})


def usage_in_openai_words(request: InferenceInput) -> ModelAnswer:
    """Usage as the chat completions API words it: not the app's keys."""
    return _answer(usage={"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6})


def usage_of_wrong_types(request: InferenceInput) -> ModelAnswer:
    """Usage whose counts are text and a negative number."""
    return _answer(usage={"input_tokens": "4", "output_tokens": -2})


def usage_as_number(request: InferenceInput) -> ModelAnswer:
    """Usage as one number: which tokens it counts is anybody's guess."""
    return _answer(usage=6)


def no_answer(request: InferenceInput) -> None:
    """Returns nothing (a forgotten ``return``)."""


def answer_of_none(request: InferenceInput) -> ModelAnswer:
    """A ``ModelAnswer`` without its answer object."""
    return ModelAnswer(content=None)  # type: ignore[arg-type]


def finish_reason_as_number(request: InferenceInput) -> ModelAnswer:
    return _answer(finish_reason=1)


def statistics_as_none(request: InferenceInput) -> ModelAnswer:
    return _answer(statistics=None)


def remaining_as_text(request: InferenceInput) -> ModelAnswer:
    return _answer(remaining_tokens="lots")
