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
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from pydantic import Field

from shared.adapters.models.provider import ModelProvider, ProviderOptions
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
    """What a handler returned, as an answer: a mapping or a ``ModelAnswer`` whose content
    is JSON (it is stored in the job document)."""
    answer = returned if isinstance(returned, ModelAnswer) else None
    content = answer.content if answer is not None else returned
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
    return answer if answer is not None else ModelAnswer(content=dict(content))


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
