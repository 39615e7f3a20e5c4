"""The Bicep templates under ``infra/`` as pycep-parser reads them, for the infra tests.

pycep-parser (https://github.com/Gijsreyn/pycep) is the Bicep parser checkov uses; the tests
pin the version checkov pins (requirements-dev.txt), so a template the tests can read is a
template checkov scans, and one pycep cannot parse fails here loudly.

pycep turns a template into JSON-like data: ``parameters``, ``variables``, ``resources``,
``modules`` and ``outputs`` keyed by symbolic name. In values, a reference to a symbol is a
:class:`BicepElement` (a ``str`` subclass) while a string literal is a plain ``str`` (raw:
escapes and ``${...}`` holes as written); calls and operators are ``{"function": ...}`` and
``{"operator": ...}`` nodes. The helpers below only look at that output: :func:`render` writes
a value back as canonical Bicep text, :func:`resolve` evaluates the compile-time part
(references to constants, ``loadJsonContent``, ``loadTextContent``, interpolation,
``take``, ``string``, ``union``, ``empty``, ``split``, ``replace``, ``min``, ``max``,
conditions, comparisons, ``&&``, ``||`` and integer ``+``, ``-``, ``*``, ``/``).
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any, cast

from pycep import BicepParser
from pycep.transformer import BicepElement

REPO_ROOT = Path(__file__).resolve().parents[2]
INFRA = REPO_ROOT / "infra"
MODULES = INFRA / "modules"
CATALOG = MODULES / "catalog.json"
ROLE_DEFINITIONS = MODULES / "role-definitions.json"
MAIN = INFRA / "main.bicep"
FUNCTION_APP = MODULES / "function-app.bicep"
DATA_STORAGE = MODULES / "storage-data.bicep"
ALERTS = MODULES / "alerts.bicep"

__all__ = [
    "ALERTS",
    "CATALOG",
    "DATA_STORAGE",
    "FUNCTION_APP",
    "INFRA",
    "MAIN",
    "MODULES",
    "REPO_ROOT",
    "ROLE_DEFINITIONS",
    "BicepElement",
    "Unresolved",
    "app_settings",
    "bicep_files",
    "constants",
    "declares_target_scope",
    "decorator",
    "has_default",
    "is_loop",
    "is_reference",
    "literal",
    "module",
    "modules",
    "outputs",
    "params",
    "read",
    "render",
    "resolve",
    "resource_body",
    "resources",
    "resources_of_type",
    "template",
    "variables",
    "walk",
    "without_comments",
]


def read(path: Path) -> str:
    """The text of a file; a missing file is an error, not an empty template."""
    if not path.is_file():
        raise FileNotFoundError(path)
    return path.read_text(encoding="utf-8")


@cache
def without_comments(text: str) -> str:
    """Bicep or KQL text without its ``//`` comments (comments may name what the code must
    not use, or what it must use, not only mention)."""
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


@cache
def _parser(*, line_numbers: bool = False) -> BicepParser:
    return BicepParser(add_line_numbers=line_numbers)


@cache
def template(path: Path) -> dict[str, Any]:
    """pycep's reading of a template (parse errors propagate: they are test failures)."""
    read(path)
    # pycep types its answer as a TypedDict of the Bicep grammar; the tests walk it as JSON.
    return cast(dict[str, Any], _parser().parse(file_path=path))


def bicep_files() -> list[Path]:
    """Every Bicep template of the repository's infrastructure."""
    return sorted(INFRA.rglob("*.bicep"))


def declares_target_scope(path: Path, scope: str) -> bool:
    """True when the template itself writes ``targetScope = '<scope>'``.

    pycep reports resourceGroup for a template that names no scope; with line numbers, a
    written scope has a real line and the default one line 0.
    """
    written = _parser(line_numbers=True).parse(file_path=path)["globals"]["scope"]
    return bool(written["value"] == scope and written["__start_line__"] > 0)


# --- statements ---------------------------------------------------------------------------


def params(path: Path) -> dict[str, dict[str, Any]]:
    """``param`` statements: name -> {decorators, type, default}."""
    found: dict[str, dict[str, Any]] = template(path).get("parameters", {})
    return found


def has_default(param: dict[str, Any]) -> bool:
    return param["default"] is not None


def decorator(param: dict[str, Any], kind: str) -> Any:
    """The argument of a decorator (``description``, ``allowed``...), or None if absent."""
    for item in param["decorators"]:
        if item["type"] == kind:
            return item.get("argument", True)
    return None


def variables(path: Path) -> dict[str, Any]:
    """``var`` statements: name -> value."""
    return {name: var["value"] for name, var in template(path).get("variables", {}).items()}


def app_settings() -> dict[str, Any]:
    """The app settings object the Function App module deploys (its ``appSettings`` var)."""
    settings = variables(FUNCTION_APP)["appSettings"]
    assert isinstance(settings, dict)
    return settings


def outputs(path: Path) -> dict[str, Any]:
    """``output`` statements: name -> value."""
    return {name: out["value"] for name, out in template(path).get("outputs", {}).items()}


def modules(path: Path) -> dict[str, dict[str, Any]]:
    """``module`` statements: symbol -> pycep's attributes (detail.path, config...)."""
    found: dict[str, dict[str, Any]] = template(path).get("modules", {})
    return found


def module(path: Path, symbol: str) -> dict[str, Any]:
    """The body (name, params...) of one module statement."""
    return resource_body(modules(path)[symbol])


def resources(path: Path) -> dict[str, dict[str, Any]]:
    """``resource`` statements: symbol -> {type, api_version, existing, config}."""
    found: dict[str, dict[str, Any]] = template(path).get("resources", {})
    return found


def resources_of_type(path: Path, resource_type: str) -> dict[str, dict[str, Any]]:
    """Resources declared (not ``existing``) with the given type, case-insensitively."""
    return {
        symbol: resource
        for symbol, resource in resources(path).items()
        if resource["type"].lower() == resource_type.lower() and not resource["existing"]
    }


def resource_body(resource: dict[str, Any]) -> dict[str, Any]:
    """The object body of a resource or module, inside its loop or condition if any."""
    config: dict[str, Any] = resource["config"]
    if "loop_type" in config or "condition" in config:
        body: dict[str, Any] = config["config"]
        return body
    return config


def is_loop(resource: dict[str, Any]) -> bool:
    return "loop_type" in resource["config"]


# --- values -------------------------------------------------------------------------------


def is_reference(value: Any, name: str | None = None) -> bool:
    """True for a bare reference to a symbol (``name`` if given), not a string literal."""
    return isinstance(value, BicepElement) and (name is None or value == name)


def _node(value: Any) -> tuple[str, str, dict[str, Any]] | None:
    """("function"|"operator", its type, its arguments) for an expression node."""
    if isinstance(value, dict) and len(value) == 1:
        ((kind, inner),) = value.items()
        if kind in ("function", "operator") and isinstance(inner, dict) and "type" in inner:
            return kind, inner["type"], inner
    return None


_OPERATORS = {
    "equals": "==",
    "not_equals": "!=",
    "greater_than": ">",
    "greater_than_or_equals": ">=",
    "less_than": "<",
    "less_than_or_equals": "<=",
    "and": "&&",
    "or": "||",
    "coalesce": "??",
    "add": "+",
    "substract": "-",
    "multiply": "*",
    "divide": "/",
    "modulo": "%",
}


def render(value: Any) -> str:
    """A pycep value as canonical Bicep-like text (references bare, literals quoted)."""
    if isinstance(value, BicepElement):
        return str(value)
    if isinstance(value, str):
        return f"'{value}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(render(item) for item in value) + "]"
    node = _node(value)
    if node is None:
        return "{" + ", ".join(f"{key}: {render(item)}" for key, item in value.items()) + "}"
    kind, node_type, inner = node
    if kind == "operator":
        operands = inner["operands"]
        if node_type == "property_accessor":
            return f"{render(operands['operand_1'])}.{render(operands['operand_2'])}"
        if node_type == "index_accessor":
            return f"{render(operands['operand_1'])}[{render(operands['operand_2'])}]"
        if node_type == "conditional":
            return (
                f"({render(operands['condition'])} ? {render(operands['true_value'])}"
                f" : {render(operands['false_value'])})"
            )
        if node_type in _OPERATORS:
            return (
                f"({render(operands['operand_1'])} {_OPERATORS[node_type]} "
                f"{render(operands['operand_2'])})"
            )
        return f"{node_type}<" + ", ".join(render(v) for v in operands.values()) + ">"
    parameters = dict(inner.get("parameters", {}))
    name = parameters.pop("func_name", None) or node_type
    text = f"{name}(" + ", ".join(render(v) for v in parameters.values() if v is not None) + ")"
    if inner.get("property_name"):
        text += f".{inner['property_name']}"
    return text


def walk(value: Any) -> list[Any]:
    """Every value nested in ``value`` (itself included), depth first."""
    found = [value]
    if isinstance(value, dict):
        for item in value.values():
            found.extend(walk(item))
    elif isinstance(value, list):
        for item in value:
            found.extend(walk(item))
    return found


_ESCAPES = {"\\": "\\", "'": "'", "n": "\n", "r": "\r", "t": "\t", "$": "$"}
_HOLE = re.compile(r"(?<!\\)\$\{")


def _unescape(raw: str) -> str:
    def replace(match: re.Match[str]) -> str:
        if match.group(1) not in _ESCAPES:
            raise ValueError(f"unknown escape \\{match.group(1)} in {raw!r}")
        return _ESCAPES[match.group(1)]

    return re.sub(r"\\(.)", replace, raw)


def _holes(raw: str) -> list[str | Any]:
    """A raw string split into literal parts and parsed ``${...}`` expressions."""
    parts: list[str | Any] = []
    index = 0
    while (match := _HOLE.search(raw, index)) is not None:
        parts.append(_unescape(raw[index : match.start()]))
        depth, end = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(raw[end], 0)
            end += 1
        expression = raw[match.end() : end - 1]
        parts.append(_parse_expression(expression))
        index = end
    parts.append(_unescape(raw[index:]))
    return [part for part in parts if part != ""]


@cache
def _parse_expression(text: str) -> Any:
    """One Bicep expression (an interpolation hole) through pycep."""
    return _parser().parse(text=f"var hole = {text}\n")["variables"]["hole"]["value"]


def literal(value: Any) -> Any:
    """A literal string decoded (escapes), with ``${...}`` holes parsed; other values as is.

    A string without holes becomes its text; one with holes becomes a list of literal
    parts and parsed expressions.
    """
    if isinstance(value, str) and not isinstance(value, BicepElement):
        parts = _holes(value)
        if all(_is_text(part) for part in parts):
            return "".join(parts)
        return parts
    return value


class Unresolved(Exception):
    """An expression depends on something only known at deployment time."""


class _Loaded:
    """A value read from JSON by ``loadJsonContent``: final, never re-read as Bicep."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _load_json(base: Path, parameters: dict[str, Any]) -> Any:
    value = json.loads(read(base / literal(parameters["file_path"])))
    path = literal(parameters.get("json_path") or "$")
    for key in [segment for segment in path.removeprefix("$").split(".") if segment]:
        value = value[key]
    return value


def resolve(value: Any, known: dict[str, Any], base: Path = MODULES) -> Any:
    """Evaluate what is known at compile time; raise :class:`Unresolved` otherwise.

    ``known`` maps symbols to pycep values (resolved on use); ``base`` is the folder that
    ``loadJsonContent`` paths are relative to.
    """
    if isinstance(value, _Loaded):
        return value.value
    if isinstance(value, BicepElement):
        if value not in known:
            raise Unresolved(str(value))
        return resolve(known[value], known, base)
    if isinstance(value, str):
        parts = _holes(value)
        return "".join(
            part if _is_text(part) else _text(resolve(part, known, base)) for part in parts
        )
    if isinstance(value, list):
        return [resolve(item, known, base) for item in value]
    node = _node(value)
    if node is None:
        if isinstance(value, dict):
            return {_key(key): resolve(item, known, base) for key, item in value.items()}
        return value
    _, node_type, inner = node
    if node_type == "property_accessor":
        owner = resolve(inner["operands"]["operand_1"], known, base)
        return _access(owner, inner["operands"]["operand_2"])
    if node_type == "index_accessor":
        owner = resolve(inner["operands"]["operand_1"], known, base)
        return owner[resolve(inner["operands"]["operand_2"], known, base)]
    if node_type in _EVALUATED_OPERATORS:
        return _operate(node_type, inner["operands"], known, base)
    parameters = inner.get("parameters", {})
    if node_type == "empty":
        return not resolve(parameters["item_to_test"], known, base)
    if node_type == "split":
        text = resolve(parameters["input_string"], known, base)
        return text.split(resolve(parameters["delimiter"], known, base))
    if node_type == "replace":
        text = resolve(parameters["original_string"], known, base)
        old = resolve(parameters["old_string"], known, base)
        return text.replace(old, resolve(parameters["new_string"], known, base))
    if node_type == "load_json_content":
        return _load_json(base, parameters)
    if node_type == "load_text_content":
        return read(base / literal(parameters["file_path"]))
    if node_type == "string":
        return _text(resolve(parameters["value_to_convert"], known, base))
    if node_type == "take":
        taken = resolve(parameters["original_value"], known, base)
        return taken[: resolve(parameters["number_to_take"], known, base)]
    if node_type == "union":
        return _union([resolve(argument, known, base) for argument in _arguments(parameters)])
    if node_type in ("min", "max"):
        numbers = [resolve(argument, known, base) for argument in _arguments(parameters)]
        return min(numbers) if node_type == "min" else max(numbers)
    raise Unresolved(render(value))


_EVALUATED_OPERATORS = {
    "conditional",
    "equals",
    "not_equals",
    "and",
    "or",
    "greater_than",
    "multiply",
    "divide",
    "add",
    "substract",
}


def _operate(node_type: str, operands: dict[str, Any], known: dict[str, Any], base: Path) -> Any:
    """The operators the templates compute settings and conditions with (``and``/``or``
    short-circuit as in Bicep, so an unknown operand that cannot matter stays unread)."""
    if node_type == "conditional":
        chosen = "true_value" if resolve(operands["condition"], known, base) else "false_value"
        return resolve(operands[chosen], known, base)
    first = resolve(operands["operand_1"], known, base)
    if node_type == "and" and not first:
        return False
    if node_type == "or" and first:
        return True
    second = resolve(operands["operand_2"], known, base)
    if node_type in ("and", "or"):
        return bool(second)
    if node_type == "equals":
        return first == second
    if node_type == "not_equals":
        return first != second
    if node_type == "greater_than":
        return first > second
    if node_type == "divide":
        return first // second  # Bicep divides integers to an integer
    if node_type == "add":
        return first + second
    if node_type == "substract":  # pycep's spelling
        return first - second
    return first * second


def _arguments(parameters: dict[str, Any]) -> list[Any]:
    """The ``arg_1, arg_2...`` parameters of a variadic function, in order."""
    numbered = {int(key.removeprefix("arg_")): item for key, item in parameters.items()}
    return [numbered[index] for index in sorted(numbered)]


def _union(values: list[Any]) -> Any:
    """``union()`` of objects (top-level keys, the last value wins) or of arrays (in order,
    without duplicates). The templates nest ``union`` explicitly where a nested object is
    extended, so ARM's recursive merge of nested objects is not needed here."""
    if all(isinstance(value, dict) for value in values):
        merged: dict[str, Any] = {}
        for value in values:
            merged.update(value)
        return merged
    if all(isinstance(value, list) for value in values):
        joined: list[Any] = []
        for value in values:
            joined.extend(item for item in value if item not in joined)
        return joined
    raise Unresolved(f"union of {values!r}")


def _key(key: str) -> str:
    """An object key: pycep keeps the quotes of a quoted key ('azd-service-name')."""
    if len(key) >= 2 and key[0] == key[-1] == "'":
        decoded = literal(key[1:-1])
        if not isinstance(decoded, str):
            raise Unresolved(f"interpolated key {key}")
        return decoded
    return key


def _is_text(part: Any) -> bool:
    """A literal part of a string (a hole holding a bare reference is a BicepElement)."""
    return isinstance(part, str) and not isinstance(part, BicepElement)


def _text(value: Any) -> str:
    """A value as ``string()`` and interpolation write it: objects and arrays as JSON."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _access(owner: Any, accessor: Any) -> Any:
    """``owner.a.b``: pycep nests the right-hand side of a chain as accessors too."""
    node = _node(accessor)
    if node is not None and node[1] == "property_accessor":
        operands = node[2]["operands"]
        return _access(_access(owner, operands["operand_1"]), operands["operand_2"])
    if not isinstance(owner, dict) or str(accessor) not in owner:
        raise Unresolved(f"{accessor} of {owner!r}")
    return owner[str(accessor)]


def constants(path: Path) -> dict[str, Any]:
    """Variables and param defaults of a template, ``loadJsonContent`` read from disk."""
    known: dict[str, Any] = {}
    for name, param in params(path).items():
        if has_default(param):
            known[name] = param["default"]
    for name, value in variables(path).items():
        node = _node(value)
        if node is not None and node[1] == "load_json_content":
            value = _Loaded(_load_json(path.parent, node[2]["parameters"]))
        known[name] = value
    return known
