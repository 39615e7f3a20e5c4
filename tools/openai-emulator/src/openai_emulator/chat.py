"""Chat completions, with the per-deployment quota of Azure OpenAI.

``POST /openai/deployments/{deployment}/chat/completions?api-version=...`` (the Azure
route) and ``POST /openai/v1/chat/completions`` (the v1 route and any OpenAI-compatible
client, the deployment named by ``model``) answer a ``chat.completion`` computed from the
request (``answers``: a value of the ``response_format`` schema, markers for failures).

A deployment may be given a quota, as Azure gives one: tokens per minute (TPM) and
requests per minute (RPM). Like the service, the emulator enforces it over short windows
(``WINDOW_SECONDS``: a minute's quota scaled to ten seconds, refilled continuously), and
counts a request's tokens before answering it: its prompt (characters / 4) plus its
``max_tokens`` (or ``max_completion_tokens``; ``DEFAULT_COMPLETION_TOKENS`` without
either), corrected to the answer's real completion tokens afterwards. A request the
window cannot take is answered 429 with the service's error body and ``retry-after-ms``
/ ``retry-after`` (the wait until the window holds it); every answer of a limited
deployment carries ``x-ratelimit-remaining-tokens`` / ``x-ratelimit-remaining-requests``
(the minute's quota left at this moment). A deployment without a quota is not limited.
``latency_ms`` makes every answer of a deployment take that long (a model's time).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .answers import response
from .errors import ApiError, bad_request
from .input_file import estimate_tokens, prompt_characters

WINDOW_SECONDS = 10.0
DEFAULT_COMPLETION_TOKENS = 256
Clock = Callable[[], float]
Quota = tuple[str, int | None, int | None, int]  # deployment, TPM, RPM, latency in ms


def parse_quota(text: str) -> Quota:
    """``DEPLOYMENT=TPM[,RPM[,LATENCY_MS]]`` (an empty TPM or RPM: that limit off), as the
    emulator's ``--deployment`` and the launcher's ``--model-quota`` take it; ValueError
    saying what is wrong otherwise."""
    name, separator, limits = text.partition("=")
    parts = limits.split(",") if separator else []
    if not name or not 1 <= len(parts) <= 3:
        raise ValueError(f"not DEPLOYMENT=TPM[,RPM[,LATENCY_MS]]: {text!r}")
    try:
        numbers = [int(part) if part.strip() else None for part in parts]
    except ValueError:
        raise ValueError(
            f"not DEPLOYMENT=TPM[,RPM[,LATENCY_MS]] in whole numbers: {text!r}"
        ) from None
    if any(n is not None and n < 0 for n in numbers):
        raise ValueError(f"not DEPLOYMENT=TPM[,RPM[,LATENCY_MS]] (negative): {text!r}")
    tokens, requests, latency = [*numbers, None, None][:3]
    return name, tokens, requests, latency or 0


@dataclass
class Bucket:
    """A minute's quota, enforced over ``WINDOW_SECONDS``: it holds at most the window's
    share, refills at the minute's rate, and may go below zero when a request larger
    than the window is let through (the next requests wait for it)."""

    per_minute: int
    level: float
    updated: float

    @property
    def capacity(self) -> float:
        return max(1.0, self.per_minute * WINDOW_SECONDS / 60)

    @property
    def rate(self) -> float:
        return self.per_minute / 60

    def refill(self, now: float) -> None:
        self.level = min(self.capacity, self.level + (now - self.updated) * self.rate)
        self.updated = now

    def wait_for(self, amount: float) -> float:
        """Seconds until ``amount`` can be taken (0: now)."""
        needed = min(amount, self.capacity)
        return 0.0 if self.level >= needed else (needed - self.level) / self.rate

    def remaining(self) -> int:
        """The minute's quota left, as the service's headers report it."""
        return max(0, math.floor(self.level * 60 / WINDOW_SECONDS))


@dataclass
class Deployment:
    """One deployment's quota, latency and what it answered."""

    name: str
    tokens: Bucket | None = None
    requests: Bucket | None = None
    latency_ms: int = 0
    served: int = 0
    throttled: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def stats(self) -> dict[str, Any]:
        return {
            "tokens_per_minute": self.tokens.per_minute if self.tokens else None,
            "requests_per_minute": self.requests.per_minute if self.requests else None,
            "latency_ms": self.latency_ms,
            "served": self.served,
            "throttled": self.throttled,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }


@dataclass
class Answered:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


def requested_tokens(body: dict[str, Any]) -> int:
    """What the quota counts for a request before it is answered."""
    limit = body.get("max_tokens", body.get("max_completion_tokens"))
    expected = (
        limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
    )
    return estimate_tokens(prompt_characters(body)) + (expected or DEFAULT_COMPLETION_TOKENS)


def _throttled(wait: float, deployment: str) -> ApiError:
    seconds = max(1, math.ceil(wait))
    return ApiError(
        429,
        "429",
        f"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version "
        f"have exceeded token rate limit of your current deployment '{deployment}'. Please "
        f"retry after {seconds} seconds.",
    )


class ChatService:
    def __init__(
        self, clock: Clock = time.monotonic, sleep: Callable[[float], None] = time.sleep
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._deployments: dict[str, Deployment] = {}

    def configure(
        self,
        name: str,
        tokens_per_minute: int | None = None,
        requests_per_minute: int | None = None,
        latency_ms: int = 0,
    ) -> dict[str, Any]:
        """Give ``name`` a quota (None: that limit off) and a latency; its counts restart."""
        for label, value in (
            ("tokens_per_minute", tokens_per_minute),
            ("requests_per_minute", requests_per_minute),
            ("latency_ms", latency_ms),
        ):
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise bad_request(f"{label} must be a whole number of 0 or more, or null.")
        now = self._clock()

        def bucket(per_minute: int | None) -> Bucket | None:
            if not per_minute:
                return None
            full = Bucket(per_minute, 0.0, now)
            full.level = full.capacity
            return full

        with self._lock:
            self._deployments[name] = Deployment(
                name, bucket(tokens_per_minute), bucket(requests_per_minute), latency_ms or 0
            )
            return self._deployments[name].stats()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"deployments": {name: d.stats() for name, d in self._deployments.items()}}

    def reset(self) -> None:
        with self._lock:
            self._deployments.clear()

    def complete(self, deployment: str, body: Any) -> Answered:
        """The answer to one chat-completions request for ``deployment``."""
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            raise bad_request("The request body needs 'messages', a list.", "invalid_request")
        estimate = requested_tokens(body)
        with self._lock:
            entry = self._deployments.setdefault(deployment, Deployment(deployment))
            now = self._clock()
            wait = self._admit(entry, estimate, now)
            if wait > 0:
                entry.throttled += 1
                error = _throttled(wait, deployment)
                headers = {
                    "retry-after-ms": str(math.ceil(wait * 1000)),
                    "retry-after": str(max(1, math.ceil(wait))),
                    **self._remaining(entry),
                }
                return Answered(429, error.body_json(), headers)
            latency = entry.latency_ms / 1000
        if latency:
            self._sleep(latency)
        answered = Answered(*response(body, deployment))
        with self._lock:
            usage = answered.body.get("usage") or {}
            entry.served += 1
            entry.prompt_tokens += int(usage.get("prompt_tokens", 0))
            entry.completion_tokens += int(usage.get("completion_tokens", 0))
            if entry.tokens is not None:  # the estimate, corrected to what was answered
                entry.tokens.level += estimate - int(usage.get("total_tokens", estimate))
                entry.tokens.level = min(entry.tokens.level, entry.tokens.capacity)
            answered.headers.update(self._remaining(entry))
        return answered

    def _admit(self, entry: Deployment, estimate: int, now: float) -> float:
        """0 and the request's tokens taken, or the seconds until the window holds it."""
        buckets = [(entry.tokens, estimate), (entry.requests, 1)]
        for bucket, _ in buckets:
            if bucket is not None:
                bucket.refill(now)
        wait = max((b.wait_for(n) for b, n in buckets if b is not None), default=0.0)
        if wait > 0:
            return wait
        for bucket, amount in buckets:
            if bucket is not None:
                bucket.level -= amount
        return 0.0

    @staticmethod
    def _remaining(entry: Deployment) -> dict[str, str]:
        headers = {}
        if entry.tokens is not None:
            headers["x-ratelimit-remaining-tokens"] = str(entry.tokens.remaining())
        if entry.requests is not None:
            headers["x-ratelimit-remaining-requests"] = str(entry.requests.remaining())
        return headers
