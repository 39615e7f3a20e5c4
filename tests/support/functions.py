"""The app's functions, indexed once per test session as the Python worker indexes them.

``FunctionApp.get_functions()`` may run only once per app object (a second call reports
every function name as a duplicate), so every test that needs the index shares this one.

Tests call a user function directly, as the worker would: a function that takes the
invocation ``context`` gets one (``InvocationContext``, no trace unless a test gives one)
when the test passes none.
"""

from __future__ import annotations

import functools
import inspect
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import function_app


@dataclass(frozen=True)
class TraceContext:
    """``func.TraceContext`` as the worker fills it (empty: the host sent no trace)."""

    trace_parent: str = ""
    trace_state: str = ""
    attributes: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class InvocationContext:
    """``func.Context`` as the worker passes it to a function."""

    function_name: str
    invocation_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_directory: str = ""
    trace_context: TraceContext = field(default_factory=TraceContext)
    retry_context: Any = None
    thread_local_storage: Any = None


class IndexedFunction:
    """An indexed function whose user function gets an invocation context."""

    def __init__(self, indexed: Any) -> None:
        self._indexed = indexed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._indexed, name)

    def get_user_function(self) -> Callable[..., Any]:
        user_function: Callable[..., Any] = self._indexed.get_user_function()
        if "context" not in inspect.signature(user_function).parameters:
            return user_function
        name = self._indexed.get_function_name()

        @functools.wraps(user_function)
        def call(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("context", InvocationContext(name))
            return user_function(*args, **kwargs)

        return call


@functools.cache
def indexed_functions() -> dict[str, Any]:
    functions: dict[str, Any] = {}
    for function in function_app.app.get_functions():
        name = function.get_function_name()
        assert name, f"every function the app registers is named: {function}"
        functions[name] = IndexedFunction(function)
    return functions
