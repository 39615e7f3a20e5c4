"""``provider: python``: a handler of the app's own answers the alias, in the worker.

The entry's ``handler`` is ``package.module:name``, a module of the app (any package at
the app root ships with it). The module is imported once per worker, when the app
starts, so a model it loads at import (scikit-learn, a Hugging Face pipeline) is loaded
once; a handler that does not import stops the start with the import's error. ``name`` is
a function, or a class whose instance (made once, without arguments) is called.

The handler is called with the ``InferenceInput`` (content, media type, parameters as the
alias declares them, request id, attempt, task) and returns the answer object (a mapping
the task's output schema describes) or a ``ModelAnswer`` when it reports its own token
usage. Sync and async handlers both work: a coroutine runs on one event loop kept for
the worker, so clients it holds stay on their loop. It raises the error tree for what it
knows (``TransientError``, ``PermanentError``, ``PolicyRefusal``); any other exception is a
transient failure (retried with backoff; after MaxRetries, dead-lettered with the
exception's type and message, redacted).

What it returns is checked where it becomes the app's answer (``answer_of``), before the
capacity gate or the task reads it: an answer that is not a JSON object is
``InvalidModelOutput``, as any model's; a ``ModelAnswer`` whose usage or other facts have
the wrong shape is the handler's failure, a ``TransientError`` saying what is wrong (so
retried with backoff, like an exception of its own). Usage may be a ``TokenUsage`` or a
plain mapping of its keys (``{"input_tokens": 6, "output_tokens": 2}``; ``total_tokens``
defaults to their sum): that shape has one reading.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, TypeGuard

from pydantic import Field, ValidationError

from shared.adapters.models.provider import ModelProvider, ProviderOptions
from shared.contracts import TokenUsage
from shared.errors import (
    InferbusError,
    InvalidInput,
    InvalidModelOutput,
    PermanentError,
    ProviderRefusal,
    TransientError,
)
from shared.inference import InferenceInput, ModelAnswer
from shared.inference.catalog import ModelCard
from shared.redaction import redact_text
from shared.settings import Settings

SYSTEM = "inferbus.python"  # its ``gen_ai.system``
Handler = Callable[[InferenceInput], object]

_handlers: dict[str, Handler] = {}
_handlers_lock = threading.Lock()


def load_handler(spec: str) -> Handler:
    """The callable ``spec`` names, imported once (ProviderRefusal when it cannot be)."""
    with _handlers_lock:
        if spec in _handlers:
            return _handlers[spec]
        module_name, separator, attribute = spec.partition(":")
        if not separator or not module_name or not attribute:
            raise ProviderRefusal("handler", f"'{spec}' is not package.module:name")
        try:
            module = importlib.import_module(module_name)
        except Exception as error:
            raise ProviderRefusal(
                "handler", f"'{spec}' does not import: {type(error).__name__}: {error}"
            ) from None
        target: object = module
        for part in attribute.split("."):
            target = getattr(target, part, None)
            if target is None:
                raise ProviderRefusal("handler", f"module {module_name} has no {attribute}")
        if inspect.isclass(target):
            try:
                target = target()
            except Exception as error:
                raise ProviderRefusal(
                    "handler", f"{spec}() failed: {type(error).__name__}: {error}"
                ) from None
        if not callable(target):
            raise ProviderRefusal("handler", f"'{spec}' is not callable")
        _handlers[spec] = target
        return target


class _Loop:
    """One event loop on a thread of its own, for the worker's async handlers."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, awaitable: Any) -> object:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=self._loop.run_forever, name="python-handlers", daemon=True
                ).start()
            loop = self._loop
        future: Future[object] = asyncio.run_coroutine_threadsafe(_awaited(awaitable), loop)
        return future.result()


async def _awaited(awaitable: Any) -> object:
    return await awaitable


_loop = _Loop()


def answer_of(returned: object, spec: str) -> ModelAnswer:
    """What a handler returned, checked as the app's answer: a mapping (the answer
    object), or a ``ModelAnswer`` whose content is one and whose facts of the call have
    their types. An answer that is not a JSON object is ``InvalidModelOutput``, as any
    model's (it is stored in the job document); facts of the wrong shape are the handler's
    failure, a ``TransientError`` naming what is wrong (retried with backoff, as a handler's
    exception), never an error further on. Usage as a plain mapping of ``TokenUsage``'s own
    keys is taken, ``total_tokens`` their sum when it is left out (``usage_of``)."""
    if not isinstance(returned, ModelAnswer):
        return ModelAnswer(content=_answer_object(returned, spec))
    _answer_object(returned.content, spec)
    problem = _facts_problem(returned)
    if problem is not None:
        raise TransientError(f"handler {spec} returned an answer whose {problem}")
    usage = usage_of(returned.usage, spec)
    return returned if usage is returned.usage else replace(returned, usage=usage)


def _answer_object(content: object, spec: str) -> Mapping[str, Any]:
    if not isinstance(content, Mapping):
        raise InvalidModelOutput(
            f"handler {spec} returned {type(content).__name__}, not a JSON object"
        )
    try:
        json.dumps(content)
    except (TypeError, ValueError) as error:
        raise InvalidModelOutput(
            f"handler {spec} returned an object that is not JSON: {error}"
        ) from None
    return dict(content)


def usage_of(given: object, spec: str) -> TokenUsage | None:
    """A handler's usage as a ``TokenUsage``: one, None, or a mapping of its keys (strict
    counts; ``total_tokens`` defaults to the sum). Anything else is TransientError."""
    if given is None or isinstance(given, TokenUsage):
        return given
    if not isinstance(given, Mapping):
        raise TransientError(
            f"handler {spec} returned an answer whose usage is {type(given).__name__}, not a "
            "TokenUsage (or a mapping of input_tokens and output_tokens)"
        )
    counts = dict(given)
    given_in, given_out = counts.get("input_tokens"), counts.get("output_tokens")
    if "total_tokens" not in counts and _is_count(given_in) and _is_count(given_out):
        counts["total_tokens"] = given_in + given_out
    try:
        return TokenUsage.model_validate(counts, strict=True)
    except ValidationError as invalid:
        problems = "; ".join(
            f"usage.{'.'.join(map(str, error['loc']))}: {error['msg']}"
            for error in invalid.errors()[:5]
        )
    raise TransientError(
        f"handler {spec} returned an answer whose usage is not a TokenUsage: {problems}"
    )


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _facts_problem(answer: ModelAnswer) -> str | None:
    """What is wrong with the facts of the call a handler reported, if anything."""
    finish: object = answer.finish_reason
    if finish is not None and not isinstance(finish, str):
        return f"finish_reason is {type(finish).__name__}, not a string"
    for name in ("remaining_tokens", "remaining_requests"):
        left: object = getattr(answer, name)
        if left is not None and not _is_count(left):
            shown = left if isinstance(left, int) and not isinstance(left, bool) else None
            return f"{name} is {shown if shown is not None else type(left).__name__}, not a count"
    statistics: object = answer.statistics
    if not isinstance(statistics, Mapping):
        return f"statistics is {type(statistics).__name__}, not a mapping of names to numbers"
    for name, value in statistics.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"statistics[{name!r}] is {type(value).__name__}, not a number"
    details: object = answer.details
    if not isinstance(details, Mapping):
        return f"details is {type(details).__name__}, not a mapping"
    try:
        json.dumps(details)
    except (TypeError, ValueError) as error:
        return f"details are not JSON: {error}"
    return None


class PythonHandlerModel:
    """Implements ``inference.ModelClient`` by calling the handler."""

    system = SYSTEM

    def __init__(self, card: ModelCard, spec: str, handler: Handler) -> None:
        self._card = card
        self._spec = spec
        self._handler = handler

    def infer(self, request: InferenceInput) -> ModelAnswer:
        try:
            parameters = self._card.parameters.read(request.parameters, request.model)
        except InvalidInput as error:
            raise PermanentError(error.message) from error
        given = request.model_copy(update={"parameters": parameters})
        try:
            returned = self._handler(given)
            if inspect.isawaitable(returned):
                returned = _loop.run(returned)
        except InvalidInput as error:
            raise PermanentError(f"handler {self._spec} refused the input: {error}") from error
        except InferbusError:
            raise
        except Exception as error:
            raise TransientError(
                f"handler {self._spec} raised {type(error).__name__}: {redact_text(str(error))}"
            ) from error
        return answer_of(returned, self._spec)


class PythonHandlerOptions(ProviderOptions):
    """An alias answered by a handler of the app's own."""

    handler: str = Field(min_length=1)  # package.module:name


def check(card: ModelCard, options: PythonHandlerOptions) -> None:
    load_handler(options.handler)


def serve(card: ModelCard, options: PythonHandlerOptions, settings: Settings) -> PythonHandlerModel:
    return PythonHandlerModel(card, options.handler, load_handler(options.handler))


PROVIDER = ModelProvider("python", PythonHandlerOptions, serve, check=check)
