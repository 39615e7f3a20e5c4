"""Python handlers (``provider: python``) as a team writes them, for the tests and the e2e stack.

Each is named in a catalog as ``tests.support.model_handlers:<name>``. They are small but
real: they read the input and the parameters, and answer what their task's schema says.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from shared.contracts import TokenUsage
from shared.errors import PermanentError, TransientError
from shared.inference import InferenceInput, ModelAnswer

# The schema of what ``sentiment`` answers (the task a catalog gives it).
SENTIMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["sentiment", "score"],
    "properties": {
        "sentiment": {"enum": ["positive", "negative", "neutral"]},
        "score": {"type": "number", "minimum": -1, "maximum": 1},
    },
}
POSITIVE = frozenset("good great excellent love happy pleased thanks wonderful".split())
NEGATIVE = frozenset("bad awful terrible hate angry broken refund late wrong".split())
IMPORTED = {"count": 0}  # how often this module was imported into a process
IMPORTED["count"] += 1


def sentiment(request: InferenceInput) -> ModelAnswer:
    """A lexicon sentiment model: positive, negative or neutral, with a score, reporting
    one token per word read as its usage."""
    words = re.findall(r"[a-z']+", request.text().lower())
    score = sum(w in POSITIVE for w in words) - sum(w in NEGATIVE for w in words)
    label = "positive" if score > 0 else "negative" if score < 0 else "neutral"
    return ModelAnswer(
        content={"sentiment": label, "score": max(-1.0, min(1.0, score / 3))},
        usage=TokenUsage(input_tokens=len(words), output_tokens=2, total_tokens=len(words) + 2),
        finish_reason="stop",
    )


async def keywords(request: InferenceInput) -> dict[str, Any]:
    """An async handler: the ``top`` longest distinct words (a parameter of its alias)."""
    await asyncio.sleep(0)
    top = int(request.parameters.get("top", 3))
    words = sorted(set(re.findall(r"[A-Za-z]{4,}", request.text())), key=lambda w: (-len(w), w))
    return {"keywords": words[:top]}


class Echo:
    """A class handler: made once per worker, then called for every request."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, request: InferenceInput) -> dict[str, Any]:
        self.calls += 1
        return {"text": request.text(), "task": request.task, "attempt": request.attempt}


def off_schema(request: InferenceInput) -> dict[str, Any]:
    """Answers what no sentiment schema allows: the model that breaks its task."""
    return {"sentiment": "ecstatic", "score": 7}


def failing(request: InferenceInput) -> dict[str, Any]:
    """Fails as its input says: ``permanent``, ``transient`` or a bug (``bug``)."""
    text = request.text()
    if "permanent" in text:
        raise PermanentError("this input can never be answered")
    if "transient" in text:
        raise TransientError("the model is warming up", retry_after=1.0)
    raise KeyError(f"a bug, with a secret in its message: https://x.example/?sig={'s3cr3t'}")


def not_a_mapping(request: InferenceInput) -> list[str]:
    return ["an", "array"]


def not_json(request: InferenceInput) -> dict[str, Any]:
    return {"when": object()}


NOT_CALLABLE = "a string"


class Broken:
    """A class handler whose constructor fails (a model file that is not there)."""

    def __init__(self) -> None:
        raise FileNotFoundError("model.joblib")
