"""JSON Schema as the catalog uses it: a task's output and a model's parameters.

A catalog's schemas are checked once, when the catalog is read (``check_object_schema``:
a valid schema, of the draft its ``$schema`` names or 2020-12, describing an object), and
compiled once (``CompiledSchema``), since every answer and every request is checked against
them. Problems are reported the way the rest of the app reports fields: a dotted location
under a prefix (``result.sentiment``, ``parameters.labels.0``) and what is wrong there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from shared.errors import FieldError

# How many problems one message names (the rest are counted).
MAX_PROBLEMS: Final = 5


def check_object_schema(schema: object) -> str | None:
    """What is wrong with ``schema`` as the schema of a JSON object, or None."""
    if not isinstance(schema, Mapping):
        return "a JSON Schema is a JSON object"
    try:
        validator_for(schema, default=Draft202012Validator).check_schema(dict(schema))
    except SchemaError as error:
        where = ".".join(str(part) for part in error.path)
        return f"not a valid JSON Schema: {error.message}" + (f" (at {where})" if where else "")
    if schema.get("type") != "object":
        return 'the schema must describe a JSON object ("type": "object")'
    return None


def _location(prefix: str, path: list[str | int]) -> str:
    return ".".join([prefix, *(str(part) for part in path)])


class CompiledSchema:
    """One schema, ready to check objects against (compiled once, reused by every call)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema: Mapping[str, Any] = schema
        validator_class = validator_for(schema, default=Draft202012Validator)
        self._validator: Validator = validator_class(schema)

    def problems(self, instance: Mapping[str, Any], prefix: str) -> tuple[FieldError, ...]:
        """Every way ``instance`` breaks the schema, located under ``prefix``, in the order
        of their locations (so a message is the same from one run to the next)."""
        errors = sorted(
            self._validator.iter_errors(instance),
            key=lambda error: [str(part) for part in error.absolute_path],
        )
        return tuple(
            FieldError(_location(prefix, list(error.absolute_path)), error.message)
            for error in errors
        )


def summarized(problems: tuple[FieldError, ...]) -> str:
    """The first few problems in one line, and how many more there are."""
    shown = "; ".join(f"{problem.field}: {problem.message}" for problem in problems[:MAX_PROBLEMS])
    hidden = len(problems) - MAX_PROBLEMS
    return shown + (f"; and {hidden} more" if hidden > 0 else "")


def strict_compatible(schema: object) -> bool:
    """Whether Azure OpenAI and OpenAI can hold a model to ``schema`` exactly (structured
    outputs with ``strict: true``): every object closes its properties
    (``additionalProperties: false``) and requires all of them. A schema that does not is
    still sent, as guidance (``strict: false``), and the answer is checked here anyway."""
    if isinstance(schema, list):
        return all(strict_compatible(item) for item in schema)
    if not isinstance(schema, Mapping):
        return True
    if schema.get("type") == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return False
        if not isinstance(properties, Mapping) or set(schema.get("required", ())) != set(
            properties
        ):
            return False
    return all(
        strict_compatible(value)
        for key, value in schema.items()
        if key not in ("enum", "const", "default", "examples", "required")
    )
