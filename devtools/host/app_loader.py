"""Index a Python v2 function app the way the Python worker does.

The worker imports the script file (``function_app.py`` unless ``PYTHON_SCRIPT_FILE_NAME``
says otherwise), finds the one ``FunctionRegister`` (``FunctionApp``/``AsgiFunctionApp``...)
at module level and calls ``get_functions()`` once: the call builds the functions from
their builders and is not safe to repeat on the same app object. Each function's binding
metadata is then read as the JSON the worker would send to the host.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import logging
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import azure.functions as func  # noqa: TID251 (the host must speak the worker's types)
from azure.functions.decorators.function_app import FunctionRegister  # noqa: TID251

from devtools.host.config import HostConfigError, resolve_binding

log = logging.getLogger("host.indexing")
SCRIPT_FILE_SETTING = "PYTHON_SCRIPT_FILE_NAME"
DEFAULT_SCRIPT_FILE = "function_app.py"


class AppLoadError(Exception):
    """The app could not be imported or indexed (the message says why)."""


@dataclass(frozen=True)
class FunctionSpec:
    """One indexed function: its trigger, bindings and the user's callable."""

    name: str
    trigger_type: str
    trigger: dict[str, Any]
    bindings: list[dict[str, Any]]
    user_function: Callable[..., Any]
    is_async: bool
    annotations: dict[str, Any] = field(default_factory=dict)
    parameters: tuple[str, ...] = ()

    @property
    def trigger_parameter(self) -> str:
        return str(self.trigger.get("name", ""))

    def parameter_of_type(self, kind: type) -> str | None:
        """The parameter annotated with ``kind`` (or a subclass), if any."""
        for name, annotation in self.annotations.items():
            if isinstance(annotation, type) and issubclass(annotation, kind):
                return name
        return None

    @property
    def wants_context(self) -> bool:
        return "context" in self.parameters or self.parameter_of_type(func.Context) is not None


def _annotations_of(function: Callable[..., Any]) -> dict[str, Any]:
    """Resolved parameter annotations; unresolvable ones are left out (never fatal)."""
    try:
        return dict(typing.get_type_hints(function))
    except Exception:
        resolved: dict[str, Any] = {}
        for name, parameter in inspect.signature(function).parameters.items():
            annotation = parameter.annotation
            if isinstance(annotation, str):
                try:
                    annotation = eval(annotation, getattr(function, "__globals__", {}))  # noqa: S307
                except Exception:
                    log.debug("annotation %r of %s is not resolvable", annotation, name)
                    continue
            if annotation is not inspect.Parameter.empty:
                resolved[name] = annotation
        return resolved


def import_script(script_root: Path, script_file: str = DEFAULT_SCRIPT_FILE) -> Any:
    """Import the app's script file with the script root first on ``sys.path``."""
    path = script_root / script_file
    if not path.is_file():
        raise AppLoadError(f"{path} not found")
    root = str(script_root.resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    module_name = Path(script_file).stem
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise AppLoadError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        raise AppLoadError(f"importing {path} failed: {error!r}") from error
    return module


def find_app(module: Any) -> FunctionRegister:
    """The single FunctionRegister instance at module level (the worker's rule)."""
    apps = [value for value in vars(module).values() if isinstance(value, FunctionRegister)]
    if len(apps) != 1:
        raise AppLoadError(
            f"expected exactly one FunctionApp in {module.__name__}, found {len(apps)}"
        )
    return apps[0]


def index_functions(app: FunctionRegister) -> list[FunctionSpec]:
    """Build every function's spec; ``get_functions()`` is called exactly once here."""
    specs = []
    for function in app.get_functions():
        try:
            bindings = [resolve_binding(json.loads(raw)) for raw in function.get_raw_bindings()]
        except HostConfigError as error:
            # The real host puts such a function in an error state and runs the others.
            log.error(
                "function %s is in error and will not run: %s", function.get_function_name(), error
            )
            continue
        trigger = next((b for b in bindings if str(b.get("type", "")).endswith("Trigger")), None)
        if trigger is None:
            raise AppLoadError(f"function {function.get_function_name()} has no trigger")
        user_function = function.get_user_function()
        specs.append(
            FunctionSpec(
                name=str(function.get_function_name()),
                trigger_type=str(trigger["type"]),
                trigger=trigger,
                bindings=bindings,
                user_function=user_function,
                is_async=inspect.iscoroutinefunction(user_function),
                annotations=_annotations_of(user_function),
                parameters=tuple(inspect.signature(user_function).parameters),
            )
        )
    return specs


def load_functions(script_root: Path, script_file: str | None = None) -> list[FunctionSpec]:
    """Import and index the app under ``script_root``."""
    module = import_script(script_root, script_file or DEFAULT_SCRIPT_FILE)
    return index_functions(find_app(module))
