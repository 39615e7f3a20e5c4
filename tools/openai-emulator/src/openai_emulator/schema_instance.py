"""A deterministic JSON value that a JSON Schema describes: the emulator's structured output.

A request with ``response_format: {"type": "json_schema", ...}`` is answered with a value
of that schema, computed from the schema and the user's text alone, so tests can predict
it: a string is the text's first sentence (cut to ``maxLength``, padded to ``minLength``),
a number the middle of its bounds (0.5 without any), an integer its lowest allowed value
(1 without bounds), a boolean ``false``, an enum its first value, an array ``minItems``
items (one at least), an object every declared property. ``$ref`` to ``#/$defs/...`` or
``#/definitions/...``, ``allOf``, ``anyOf`` and ``oneOf`` (the first choice) are followed.
``pattern`` and ``format`` are not honoured: the models that need them are not emulated.
"""

from __future__ import annotations

import math
from typing import Any

MAX_DEPTH = 16


def _resolve(schema: Any, root: dict[str, Any]) -> Any:
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str):
        reference = schema["$ref"]
        if not reference.startswith("#/"):
            return {}
        target: Any = root
        for part in reference[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            target = target.get(part) if isinstance(target, dict) else None
        schema = target if target is not None else {}
    return schema


def _number(schema: dict[str, Any], integer: bool) -> int | float:
    if integer:
        if "minimum" in schema:
            return math.ceil(float(schema["minimum"]))
        if "exclusiveMinimum" in schema:
            return math.floor(float(schema["exclusiveMinimum"])) + 1
        if "maximum" in schema:
            return math.floor(float(schema["maximum"]))
        if "exclusiveMaximum" in schema:
            return math.ceil(float(schema["exclusiveMaximum"])) - 1
        return 1
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    if low is not None and high is not None:
        return (float(low) + float(high)) / 2
    if low is not None:
        return float(low) + 0.5
    if high is not None:
        return float(high) - 0.5
    return 0.5


def _string(schema: dict[str, Any], text: str) -> str:
    value = text
    if isinstance(schema.get("maxLength"), int):
        value = value[: schema["maxLength"]]
    if isinstance(schema.get("minLength"), int) and len(value) < schema["minLength"]:
        value = value + "x" * (schema["minLength"] - len(value))
    return value


def instance(schema: Any, text: str, root: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """The value of ``schema`` for ``text`` (see the module's rules)."""
    root = root if root is not None else (schema if isinstance(schema, dict) else {})
    schema = _resolve(schema, root)
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return None
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        choices = schema.get(key)
        if isinstance(choices, list) and choices:
            preferred = [c for c in choices if _resolve(c, root).get("type") != "null"] or choices
            return instance(preferred[0], text, root, depth + 1)
    if isinstance(schema.get("allOf"), list):
        merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
        for part in schema["allOf"]:
            resolved = _resolve(part, root)
            if isinstance(resolved, dict):
                properties = {**merged.get("properties", {}), **resolved.get("properties", {})}
                merged = {**merged, **resolved, "properties": properties}
        return instance(merged, text, root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        declared = schema.get("properties")
        if not isinstance(declared, dict):
            return {}
        return {name: instance(sub, text, root, depth + 1) for name, sub in declared.items()}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        return [instance(schema.get("items", {}), text, root, depth + 1) for _ in range(count)]
    if kind == "integer":
        return _number(schema, integer=True)
    if kind == "number":
        return _number(schema, integer=False)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return _string(schema, text)
