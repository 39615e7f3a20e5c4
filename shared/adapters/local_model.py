"""LocalModel: a deterministic, offline document analyzer behind the ModelClient port.

It stands in for a hosted model in development, tests and benchmarks, and does real work
so that results are meaningful: language-neutral statistics, an extractive summary (the
sentences whose words are most frequent in the document), a document-type classification
with a confidence, a review flag and a priority suggestion, and a content policy that
refuses documents containing configured terms.

Latency and faults are injected by settings only: ``latency_ms`` and ``transient_rate``
(benchmarks; the random fault draw is seeded by the request id and attempt, so a run is
reproducible), and ``simulate_on_request`` (``LocalModelFaults``, the development stack
and its end-to-end tests), which alone lets a request's ``parameters.simulate`` ask for a
fault: ``{"simulate": {"transient_attempts": 2, "retry_after": 1}}`` fails the first two
attempts, ``{"always_transient": true}`` every attempt, ``{"permanent": true}`` fails
permanently. With it off (the default), ``simulate`` is ignored here and intake refuses
it with 422, so no caller can make the model fail. Parameters are read typed
(``model_parameters.LocalAnalyzerParameters``): ``summary_sentences`` is honoured, the
sampling parameters of the hosted models are accepted and ignored.

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

from shared.adapters.local_model_vocabulary import (
    DOCUMENT_TYPES,
    LANGUAGE_CUES,
    STOP_WORDS,
    URGENT_TERMS,
)
from shared.contracts import InferenceResult, Priority, TokenUsage
from shared.errors import InvalidInput, PermanentError, PolicyRefusal, TransientError
from shared.inference import InferenceInput
from shared.model_parameters import LocalAnalyzerParameters, SimulatedFaults, parse_parameters

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
        simulate_on_request: bool = False,
        review_threshold: float = 0.5,
    ) -> None:
        self._refusal_terms = tuple(t.lower() for t in refusal_terms if t)
        self._latency_s = latency_ms / 1000
        self._transient_rate = transient_rate
        self._simulate_on_request = simulate_on_request
        self._review_threshold = review_threshold

    def parameters(self, request: InferenceInput) -> LocalAnalyzerParameters:
        """The request's parameters as declared (``model_parameters``); PermanentError when
        they break the declaration: intake refuses such a request, so only a message no
        door checked can carry one, and no retry can mend it. Without LocalModelFaults,
        ``simulate`` is not ours to honour (nor to fail on): it is dropped unread."""
        given = dict(request.parameters)
        if not self._simulate_on_request:
            given.pop("simulate", None)
        try:
            return parse_parameters(LocalAnalyzerParameters, given, request.model)
        except InvalidInput as error:
            raise PermanentError(error.message) from error

    def infer(self, request: InferenceInput) -> InferenceResult:
        parameters = self.parameters(request)
        self._simulate(request, parameters.simulate)
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
        summary = extractive_summary(sentences, frequencies, parameters.summary_sentences)
        return InferenceResult(
            summary=summary,
            document_type=document_type,
            confidence=confidence,
            language=guess_language(words),
            review_required=sensitive or confidence < self._review_threshold,
            suggested_priority=Priority.HIGH if urgent else Priority.NORMAL,
            statistics=statistics(text, words, sentences),
            details={
                "sensitive_numbers": sensitive,
                "urgent_terms": urgent,
                "top_terms": [w for w, _ in frequencies.most_common(5)],
            },
            usage=approximate_usage(text, summary),
            finish_reason="stop",
        )

    def _binary(self, request: InferenceInput) -> InferenceResult:
        kind = request.media_type.split("/")[0]
        document_type = "image" if kind == "image" else request.media_type.split(";")[0]
        digest = hashlib.sha256(request.content).hexdigest()[:16]
        summary = f"{request.media_type} document of {len(request.content)} bytes"
        return InferenceResult(
            summary=summary,
            document_type=document_type,
            confidence=0.5,
            review_required=True,
            statistics={"bytes": len(request.content)},
            details={"fingerprint": digest},
            usage=approximate_usage("", summary),
            finish_reason="stop",
        )

    def _simulate(self, request: InferenceInput, spec: SimulatedFaults | None) -> None:
        if spec is not None:
            if spec.permanent:
                raise PermanentError("simulated permanent model failure")
            if spec.always_transient or request.attempt < spec.transient_attempts:
                raise TransientError("simulated model throttling (429)", spec.retry_after)
        retry_after = spec.retry_after if spec is not None else None
        if self._transient_rate:
            seed = hashlib.sha256(f"{request.request_id}:{request.attempt}".encode()).digest()
            if random.Random(seed).random() < self._transient_rate:  # noqa: S311 (fault injection)
                raise TransientError("injected transient model failure", retry_after=retry_after)
