"""LocalModel: a deterministic, offline document analyzer behind the ModelClient port.

It stands in for a hosted model in development, tests and benchmarks, and does real work
so that results are meaningful: language-neutral statistics, an extractive summary (the
sentences whose words are most frequent in the document), a document-type classification
with a confidence, a review flag and a priority suggestion, and a content policy that
refuses documents containing configured terms.

It serves the built-in task only (``provider: local``, ``task: document-analysis``) and
answers what a hosted model is asked for (the task's six answer fields), plus the
statistics and details of its reading. Parameters are read as the alias declares them
(by default ``GenerationParameters``): ``summary_sentences`` is honoured, the sampling
parameters of the hosted models are accepted and ignored.

Latency and faults are injected by settings only (``LocalModelLatencyMs``,
``LocalModelTransientRate``: benchmarks; the random fault draw is seeded by the request id
and attempt, so a run is reproducible). Faults a request asks for (``parameters.simulate``,
development stacks only) are raised before any model runs (``shared.inference.faults``).

It reports token usage as a hosted model would, so that token metrics and stored usage
can be tried locally: one token per whitespace-separated word of the text it read and of
the summary it wrote (a hosted tokenizer counts more, roughly 1.3 per English word, but
a stable, explainable count matters more here than a faithful one). A binary document is
not read as text: zero input tokens.
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from collections import Counter

from shared.adapters.models.local_vocabulary import (
    DOCUMENT_TYPES,
    LANGUAGE_CUES,
    STOP_WORDS,
    URGENT_TERMS,
)
from shared.adapters.models.provider import ModelProvider, NoOptions
from shared.contracts import DOCUMENT_ANALYSIS, Priority, TokenUsage
from shared.errors import InvalidInput, PermanentError, PolicyRefusal, TransientError
from shared.inference import InferenceInput, ModelAnswer
from shared.inference.catalog import ModelCard
from shared.inference.parameters import GENERATION_PARAMETERS, ParameterDeclaration
from shared.settings import Settings

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_SENTENCE_END = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s+|\n{2,}")
_DIGITS = re.compile(r"\d")
_CARD_OR_IBAN = re.compile(r"\b(?:\d[ -]?){13,19}\b|\b[A-Z]{2}\d{2}[A-Z0-9]{11,30}\b")


def approximate_usage(read: str, written: str) -> TokenUsage:
    """One token per whitespace-separated word read and written (see the module doc)."""
    input_tokens, output_tokens = len(read.split()), len(written.split())
    return TokenUsage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )


def guess_language(words: list[str]) -> str | None:
    """The language whose function words occur most (None when none occur)."""
    lowered = [w.lower() for w in words]
    scores = {lang: sum(w in cues for w in lowered) for lang, cues in LANGUAGE_CUES.items()}
    best = max(sorted(scores), key=lambda lang: scores[lang])
    return best if scores[best] else None


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def statistics(text: str, words: list[str], sentences: list[str]) -> dict[str, float | int]:
    letters = sum(len(w) for w in words)
    return {
        "characters": len(text),
        "words": len(words),
        "sentences": len(sentences),
        "paragraphs": len([p for p in re.split(r"\n\s*\n", text) if p.strip()]),
        "unique_words": len({w.lower() for w in words}),
        "average_word_length": round(letters / len(words), 3) if words else 0.0,
        "digit_ratio": round(len(_DIGITS.findall(text)) / len(text), 4) if text else 0.0,
    }


def extractive_summary(sentences: list[str], frequencies: Counter[str], count: int) -> str:
    """The ``count`` highest-scoring sentences, in document order."""
    if not sentences:
        return ""

    def score(sentence: str) -> float:
        tokens = [w.lower() for w in _WORD.findall(sentence)]
        content = [t for t in tokens if t not in STOP_WORDS and len(t) > 2]
        return sum(frequencies[t] for t in content) / (len(content) or 1)

    ranked = sorted(range(len(sentences)), key=lambda i: (-score(sentences[i]), i))
    chosen = sorted(ranked[: max(1, count)])
    return " ".join(sentences[i] for i in chosen)


def classify(frequencies: Counter[str]) -> tuple[str, float]:
    """The document type whose cues occur most, and the share of cue hits it took."""
    scores = {kind: sum(frequencies[c] for c in cues) for kind, cues in DOCUMENT_TYPES.items()}
    total = sum(scores.values())
    if total == 0:
        return "other", 0.2
    kind = max(sorted(scores), key=lambda k: scores[k])
    return kind, round(scores[kind] / total, 3)


class LocalModel:
    """Implements ``inference.ModelClient`` without network or weights."""

    name = "local-analyzer"
    system = "inferbus.local"  # its OpenTelemetry ``gen_ai.system``

    def __init__(
        self,
        *,
        refusal_terms: tuple[str, ...] = (),
        latency_ms: int = 0,
        transient_rate: float = 0.0,
        review_threshold: float = 0.5,
        parameters: ParameterDeclaration = GENERATION_PARAMETERS,
    ) -> None:
        self._refusal_terms = tuple(t.lower() for t in refusal_terms if t)
        self._latency_s = latency_ms / 1000
        self._transient_rate = transient_rate
        self._review_threshold = review_threshold
        self._parameters = parameters

    def summary_sentences(self, request: InferenceInput) -> int:
        """How long a summary the request asks for. PermanentError when its parameters
        break the alias's declaration: intake refuses such a request, so only a message no
        door checked can carry one, and no retry can mend it."""
        try:
            parameters = self._parameters.read(request.parameters, request.model)
        except InvalidInput as error:
            raise PermanentError(error.message) from error
        count = parameters.get("summary_sentences", 2)
        return count if isinstance(count, int) and count > 0 else 2

    def infer(self, request: InferenceInput) -> ModelAnswer:
        sentences_wanted = self.summary_sentences(request)
        self._inject_fault(request)
        if self._latency_s:
            time.sleep(self._latency_s)
        if not request.media_type.startswith(("text/", "application/json")):
            return self._binary(request)
        text = request.text()
        lowered = text.lower()
        for term in self._refusal_terms:
            if term in lowered:
                raise PolicyRefusal(
                    "the content contains a term refused by policy", "configured_term"
                )
        words = _WORD.findall(text)
        frequencies = Counter(w.lower() for w in words if w.lower() not in STOP_WORDS)
        sentences = _sentences(text)
        document_type, confidence = classify(frequencies)
        sensitive = bool(_CARD_OR_IBAN.search(text))
        urgent = any(term in lowered for term in URGENT_TERMS)
        summary = extractive_summary(sentences, frequencies, sentences_wanted)
        return ModelAnswer(
            content={
                "summary": summary,
                "document_type": document_type,
                "confidence": confidence,
                "language": guess_language(words),
                "review_required": sensitive or confidence < self._review_threshold,
                "suggested_priority": (Priority.HIGH if urgent else Priority.NORMAL).value,
            },
            usage=approximate_usage(text, summary),
            finish_reason="stop",
            statistics=statistics(text, words, sentences),
            details={
                "sensitive_numbers": sensitive,
                "urgent_terms": urgent,
                "top_terms": [w for w, _ in frequencies.most_common(5)],
            },
        )

    def _binary(self, request: InferenceInput) -> ModelAnswer:
        kind = request.media_type.split("/")[0]
        document_type = "image" if kind == "image" else request.media_type.split(";")[0]
        digest = hashlib.sha256(request.content).hexdigest()[:16]
        summary = f"{request.media_type} document of {len(request.content)} bytes"
        return ModelAnswer(
            content={
                "summary": summary,
                "document_type": document_type,
                "confidence": 0.5,
                "review_required": True,
            },
            usage=approximate_usage("", summary),
            finish_reason="stop",
            statistics={"bytes": len(request.content)},
            details={"fingerprint": digest},
        )

    def _inject_fault(self, request: InferenceInput) -> None:
        if self._transient_rate:
            seed = hashlib.sha256(f"{request.request_id}:{request.attempt}".encode()).digest()
            if random.Random(seed).random() < self._transient_rate:  # noqa: S311 (fault injection)
                raise TransientError("injected transient model failure")


def serve(card: ModelCard, options: NoOptions, settings: Settings) -> LocalModel:
    return LocalModel(
        refusal_terms=settings.local_model.refusal_terms,
        latency_ms=settings.local_model.latency_ms,
        transient_rate=settings.local_model.transient_rate,
        parameters=card.parameters,
    )


PROVIDER = ModelProvider("local", NoOptions, serve, tasks=frozenset({DOCUMENT_ANALYSIS}))
