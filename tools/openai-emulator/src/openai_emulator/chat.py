"""Chat completions, with the per-deployment quota of Azure OpenAI.

``POST /openai/deployments/{deployment}/chat/completions?api-version=...`` (the Azure
route) and ``POST /openai/v1/chat/completions`` (the v1 route and any OpenAI-compatible
client, the deployment named by ``model``) answer a ``chat.completion`` computed from the
request (``answers``: a value of the ``response_format`` schema, markers for failures).

A deployment may be given a quota, as Azure gives one: tokens per minute (TPM) and
requests per minute (RPM), and the shape of the limiter that enforces it:

* ``window`` (the default), as Azure OpenAI enforces it, over short windows
  (``WINDOW_SECONDS``: a minute's quota scaled to ten seconds, refilled continuously:
  ``Bucket``);
* ``minute``, a sliding minute, as other OpenAI-compatible services (and some
  deployments) do: what was admitted over the last ``MINUTE_SECONDS`` plus the request
  may not pass the minute's quota, so a whole minute's quota may go at once
  (``SlidingMinute``).

Either counts a request's tokens before answering it: its prompt (characters / 4) plus its
``max_tokens`` (or ``max_completion_tokens``; ``DEFAULT_COMPLETION_TOKENS`` without
either), corrected to the answer's real tokens afterwards. A request the limiter cannot
take is answered 429 with the service's error body and ``retry-after-ms`` /
``retry-after`` (the wait until the window holds it, or until enough of the oldest
admissions leave the minute); every answer of a limited deployment carries
``x-ratelimit-remaining-tokens`` / ``x-ratelimit-remaining-requests`` (the minute's quota
left at this moment). A request larger than the limiter can ever hold (the window's
share, or the whole minute's quota) is let through once all of it is free (the window
full, the minute empty) and counted in full: the next requests wait until the window has
refilled past it, or until it has left the minute. A deployment without a quota is not
limited. ``latency_ms`` makes every answer of a deployment take that long (a model's
time).

A deployment of a reasoning model refuses what the service refuses for one, before its
quota counts the request: a ``temperature`` other than the default (1) is a 400
``unsupported_value``, and ``max_tokens`` a 400 ``unsupported_parameter`` (such a model
takes ``max_completion_tokens`` only), each naming the ``param``. The emulator has no
model behind a deployment, so the deployment's name says which it is: a name that starts
with one of ``REASONING_PREFIXES`` (``gpt-5``, ``o1``, ``o3``, ``o4``, as Azure's
deployments are usually named after their model) is a reasoning deployment.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args

from .answers import response
from .errors import ApiError, bad_request
from .input_file import estimate_tokens, prompt_characters

WINDOW_SECONDS = 10.0
MINUTE_SECONDS = 60.0
DEFAULT_COMPLETION_TOKENS = 256
Clock = Callable[[], float]
# Deployment names taken for reasoning models (see the module's docstring), lower case.
REASONING_PREFIXES = ("gpt-5", "o1", "o3", "o4")
DEFAULT_TEMPERATURE = 1
Limiter = Literal["window", "minute"]  # 10-second windows (Azure's) or a sliding minute
LIMITERS: tuple[Limiter, ...] = get_args(Limiter)
DEFAULT_LIMITER: Limiter = "window"
# deployment, TPM, RPM, latency in ms[, limiter]: without the limiter (as quotas were
# written before there was a choice), the window; parse_quota writes it only for "minute".
Quota = tuple[str, int | None, int | None, int] | tuple[str, int | None, int | None, int, Limiter]
QUOTA_SYNTAX = "DEPLOYMENT=TPM[,RPM[,LATENCY_MS[,LIMITER]]]"


def parse_quota(text: str) -> Quota:
    """``DEPLOYMENT=TPM[,RPM[,LATENCY_MS[,LIMITER]]]`` (an empty TPM or RPM: that limit
    off; LIMITER ``window``, the default, or ``minute``), as the emulator's
    ``--deployment`` and the launcher's ``--model-quota`` take it; ValueError saying what
    is wrong otherwise. With the default limiter, the quota is the 4-tuple it always was
    (it compares and unpacks as before); ``minute`` adds a fifth field."""
    name, separator, limits = text.partition("=")
    parts = limits.split(",") if separator else []
    if not name or not 1 <= len(parts) <= 4:
        raise ValueError(f"not {QUOTA_SYNTAX}: {text!r}")
    limiter = parts[3].strip().lower() if len(parts) == 4 else ""
    try:
        numbers = [int(part) if part.strip() else None for part in parts[:3]]
    except ValueError:
        raise ValueError(f"not {QUOTA_SYNTAX} in whole numbers: {text!r}") from None
    if any(n is not None and n < 0 for n in numbers):
        raise ValueError(f"not {QUOTA_SYNTAX} (negative): {text!r}")
    if limiter and limiter not in LIMITERS:
        raise ValueError(
            f"not {QUOTA_SYNTAX}: LIMITER is {' or '.join(LIMITERS)}, got {parts[3]!r}: {text!r}"
        )
    tokens, requests, latency = [*numbers, None, None][:3]
    if limiter == "minute":
        return name, tokens, requests, latency or 0, "minute"
    return name, tokens, requests, latency or 0


def quota_fields(quota: Quota) -> tuple[str, int | None, int | None, int, Limiter]:
    """Every field of a quota, the limiter filled in when it was left out."""
    match quota:
        case (name, tokens, requests, latency):
            return name, tokens, requests, latency, DEFAULT_LIMITER
        case (name, tokens, requests, latency, limiter):
            return name, tokens, requests, latency, limiter
        case _:
            raise ValueError(f"not a quota (4 or 5 fields): {quota!r}")


@dataclass
class Admission:
    """What a limiter took for one request, and when (corrected after the answer)."""

    at: float
    amount: float


class Allowance(Protocol):
    """A minute's quota of tokens or of requests, as one limiter shape enforces it."""

    per_minute: int

    def wait(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` can be taken (0: now)."""
        ...

    def take(self, amount: float, now: float) -> Admission: ...

    def correct(self, admission: Admission, amount: float) -> None:
        """What ``admission`` took is ``amount`` after all."""
        ...

    def remaining(self, now: float) -> int:
        """The minute's quota left, as the service's headers report it."""
        ...


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

    def wait(self, amount: float, now: float) -> float:
        self.refill(now)
        needed = min(amount, self.capacity)
        return 0.0 if self.level >= needed else (needed - self.level) / self.rate

    def take(self, amount: float, now: float) -> Admission:
        self.level -= amount
        return Admission(now, amount)

    def correct(self, admission: Admission, amount: float) -> None:
        self.level = min(self.capacity, self.level + admission.amount - amount)
        admission.amount = amount

    def remaining(self, now: float) -> int:
        return max(0, math.floor(self.level * 60 / WINDOW_SECONDS))


@dataclass
class SlidingMinute:
    """A minute's quota over a sliding minute: what was admitted over the last
    ``MINUTE_SECONDS`` plus a request may not pass it. A request larger than the whole
    quota is let through when the minute is empty (as ``Bucket`` lets one larger than
    its window through when it is full), so the next requests wait until it leaves."""

    per_minute: int
    admitted: deque[Admission] = field(default_factory=deque)  # oldest first

    def used(self, now: float) -> float:
        """What was admitted over the minute before ``now`` (the older admissions left)."""
        while self.admitted and self.admitted[0].at + MINUTE_SECONDS <= now:
            self.admitted.popleft()
        return sum(admission.amount for admission in self.admitted)

    def wait(self, amount: float, now: float) -> float:
        excess = self.used(now) + min(amount, self.per_minute) - self.per_minute
        for admission in self.admitted:  # the oldest leave the minute first
            if excess <= 0:
                break
            excess -= admission.amount
            if excess <= 0:
                return admission.at + MINUTE_SECONDS - now
        return 0.0

    def take(self, amount: float, now: float) -> Admission:
        admission = Admission(now, amount)
        self.admitted.append(admission)
        return admission

    def correct(self, admission: Admission, amount: float) -> None:
        admission.amount = amount  # still counted if it is still in the minute

    def remaining(self, now: float) -> int:
        return max(0, math.floor(self.per_minute - self.used(now)))


@dataclass
class Deployment:
    """One deployment's quota, latency and what it answered."""

    name: str
    tokens: Allowance | None = None
    requests: Allowance | None = None
    latency_ms: int = 0
    limiter: Limiter = DEFAULT_LIMITER
    served: int = 0
    throttled: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def stats(self) -> dict[str, Any]:
        return {
            "tokens_per_minute": self.tokens.per_minute if self.tokens else None,
            "requests_per_minute": self.requests.per_minute if self.requests else None,
            "latency_ms": self.latency_ms,
            "limiter": self.limiter,
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


def is_reasoning(deployment: str) -> bool:
    """Whether ``deployment`` stands for a reasoning model (its name's prefix)."""
    return deployment.lower().startswith(REASONING_PREFIXES)


def refuse_reasoning_parameters(deployment: str, body: dict[str, Any]) -> None:
    """The service's 400 for what a reasoning deployment does not take: a temperature
    other than the default, or ``max_tokens``. Nothing for any other deployment."""
    if not is_reasoning(deployment):
        return
    temperature = body.get("temperature")
    if temperature is not None and temperature != DEFAULT_TEMPERATURE:
        raise ApiError(
            400,
            "unsupported_value",
            f"Unsupported value: 'temperature' does not support {temperature!r} with this "
            f"model. Only the default ({DEFAULT_TEMPERATURE}) value is supported.",
            param="temperature",
            kind="invalid_request_error",
        )
    if "max_tokens" in body:
        raise ApiError(
            400,
            "unsupported_parameter",
            "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            param="max_tokens",
            kind="invalid_request_error",
        )


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
        limiter: Limiter = DEFAULT_LIMITER,
    ) -> dict[str, Any]:
        """Give ``name`` a quota (None: that limit off), the shape of the limiter that
        enforces it (``LIMITERS``) and a latency; its counts restart."""
        for label, value in (
            ("tokens_per_minute", tokens_per_minute),
            ("requests_per_minute", requests_per_minute),
            ("latency_ms", latency_ms),
        ):
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 0
            ):
                raise bad_request(f"{label} must be a whole number of 0 or more, or null.")
        if limiter not in LIMITERS:
            raise bad_request(f"limiter must be {' or '.join(map(repr, LIMITERS))}.")
        now = self._clock()

        def allowance(per_minute: int | None) -> Allowance | None:
            if not per_minute:
                return None
            if limiter == "minute":
                return SlidingMinute(per_minute)
            full = Bucket(per_minute, 0.0, now)
            full.level = full.capacity
            return full

        with self._lock:
            self._deployments[name] = Deployment(
                name,
                allowance(tokens_per_minute),
                allowance(requests_per_minute),
                latency_ms or 0,
                limiter,
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
        refuse_reasoning_parameters(deployment, body)
        estimate = requested_tokens(body)
        with self._lock:
            entry = self._deployments.setdefault(deployment, Deployment(deployment))
            now = self._clock()
            wait, taken = self._admit(entry, estimate, now)
            if wait > 0:
                entry.throttled += 1
                error = _throttled(wait, deployment)
                headers = {
                    "retry-after-ms": str(math.ceil(wait * 1000)),
                    "retry-after": str(max(1, math.ceil(wait))),
                    **self._remaining(entry, now),
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
            if entry.tokens is not None and taken is not None:
                # the estimate, corrected to what was answered
                entry.tokens.correct(taken, int(usage.get("total_tokens", estimate)))
            answered.headers.update(self._remaining(entry, self._clock()))
        return answered

    def _admit(
        self, entry: Deployment, estimate: int, now: float
    ) -> tuple[float, Admission | None]:
        """0 and the request's tokens taken (what the token quota took, if there is one),
        or the seconds until the limiters hold it."""
        limits = [(entry.tokens, estimate), (entry.requests, 1)]
        wait = max((a.wait(n, now) for a, n in limits if a is not None), default=0.0)
        if wait > 0:
            return wait, None
        if entry.requests is not None:
            entry.requests.take(1, now)
        return 0.0, None if entry.tokens is None else entry.tokens.take(estimate, now)

    @staticmethod
    def _remaining(entry: Deployment, now: float) -> dict[str, str]:
        headers = {}
        if entry.tokens is not None:
            headers["x-ratelimit-remaining-tokens"] = str(entry.tokens.remaining(now))
        if entry.requests is not None:
            headers["x-ratelimit-remaining-requests"] = str(entry.requests.remaining(now))
        return headers
