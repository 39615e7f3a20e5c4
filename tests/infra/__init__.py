"""Readers for the Bicep templates under ``infra/``, shared by the infra tests.

The Bicep compiler is not available where the tests run, so these helpers read the
subset of Bicep the templates use: ``param``/``var``/``resource``/``import`` statements,
multi-line object and array literals, strings (with ``${...}`` interpolation), numbers and
booleans. Anything else (function calls, ternaries, property access) is kept as an
:class:`Expression` holding its source text, so a test can still look at it, and
:func:`resolve` turns references to known constants back into values.

The reader is strict on purpose: an unterminated literal or a statement it cannot find
raises :class:`BicepReadError` instead of returning something plausible.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
INFRA = REPO_ROOT / "infra"
MODULES = INFRA / "modules"

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"-?\d+")
_REFERENCE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[\d+\])*$")


class BicepReadError(ValueError):
    """The text is not the Bicep subset these helpers understand."""


@dataclass(frozen=True)
class Expression:
    """A Bicep expression kept as source text (a call, a reference, a ternary...)."""

    text: str


@dataclass(frozen=True)
class Interpolated:
    """A string with ``${...}`` holes: literal parts and expressions, in order."""

    parts: tuple[str | Expression, ...]


@dataclass
class Resource:
    """A ``resource`` statement: symbolic name, type, API version and parsed body."""

    symbol: str
    type: str
    api_version: str
    body: dict[str, Any]
    is_loop: bool = False
    existing: bool = False


@dataclass
class Param:
    """A ``param`` statement with its decorators (raw text) and default value."""

    name: str
    type: str
    default: Any = None
    has_default: bool = False
    decorators: list[str] = field(default_factory=list)


# --- lexical helpers --------------------------------------------------------------------


def _skip_space(text: str, pos: int, *, newlines: bool = True) -> int:
    """Skip spaces and comments; newlines too unless ``newlines`` is False."""
    while pos < len(text):
        char = text[pos]
        if char in " \t\r" or (newlines and char == "\n"):
            pos += 1
        elif text.startswith("//", pos):
            end = text.find("\n", pos)
            pos = len(text) if end == -1 else end
        elif text.startswith("/*", pos):
            end = text.find("*/", pos + 2)
            if end == -1:
                raise BicepReadError("unterminated block comment")
            pos = end + 2
        else:
            break
    return pos


def _string_end(text: str, pos: int) -> int:
    """Index just past the single-quoted string that starts at ``pos``."""
    if text.startswith("'''", pos):
        end = text.find("'''", pos + 3)
        if end == -1:
            raise BicepReadError("unterminated multi-line string")
        return end + 3
    index = pos + 1
    depth = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if depth == 0 and text.startswith("${", index):
            depth = 1
            index += 2
            continue
        if depth:
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
            elif char == "'":
                index = _string_end(text, index)
                continue
        elif char == "'":
            return index + 1
        elif char == "\n":
            raise BicepReadError(f"newline inside string at offset {pos}")
        index += 1
    raise BicepReadError(f"unterminated string at offset {pos}")


def _expression_end(text: str, pos: int) -> int:
    """End of an expression: the end of its line, continuing across open brackets."""
    depth = 0
    index = pos
    while index < len(text):
        char = text[index]
        if char == "'":
            index = _string_end(text, index)
            continue
        if text.startswith("//", index) and depth == 0:
            break
        if char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif char == "\n" and depth == 0:
            following = _skip_space(text, index)
            if not text.startswith(("?", ":", "&&", "||"), following):
                break  # a ternary may continue on the next lines
            index = following
            continue
        elif char == "," and depth == 0:
            break
        index += 1
    if depth:
        raise BicepReadError(f"unbalanced brackets in expression at offset {pos}")
    return index


_ESCAPES = {"\\": "\\", "'": "'", "n": "\n", "r": "\r", "t": "\t", "$": "$"}


def _decode_string(raw: str) -> str | Interpolated:
    """Decode a quoted Bicep string; interpolations become :class:`Interpolated`."""
    if raw.startswith("'''"):
        return raw[3:-3]
    body = raw[1:-1]
    parts: list[str | Expression] = []
    buffer: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        if char == "\\":
            escaped = body[index + 1]
            if escaped not in _ESCAPES:
                raise BicepReadError(f"unknown escape \\{escaped} in {raw}")
            buffer.append(_ESCAPES[escaped])
            index += 2
        elif body.startswith("${", index):
            depth, end = 1, index + 2
            while depth:
                if body[end] == "'":
                    end = _string_end(body, end)
                    continue
                depth += {"{": 1, "}": -1}.get(body[end], 0)
                end += 1
            if buffer:
                parts.append("".join(buffer))
                buffer = []
            parts.append(Expression(body[index + 2 : end - 1].strip()))
            index = end
        else:
            buffer.append(char)
            index += 1
    if buffer:
        parts.append("".join(buffer))
    if any(isinstance(part, Expression) for part in parts):
        return Interpolated(tuple(parts))
    return "".join(part for part in parts if isinstance(part, str))


# --- values -----------------------------------------------------------------------------


def parse_value(text: str, pos: int) -> tuple[Any, int]:
    """Parse the Bicep value starting at ``pos``; return it and the index after it."""
    pos = _skip_space(text, pos, newlines=False)
    if pos >= len(text):
        raise BicepReadError("value expected at end of text")
    char = text[pos]
    if char == "{":
        return _parse_object(text, pos)
    if char == "[" and not re.match(r"\[\s*for\b", text[pos:]):
        return _parse_array(text, pos)
    literal: Any
    end: int
    if char == "'":
        end = _string_end(text, pos)
        literal = _decode_string(text[pos:end])
    elif (match := _NUMBER.match(text, pos)) and not _IDENT.match(text, match.end()):
        literal, end = int(match.group()), match.end()
    elif (match := _IDENT.match(text, pos)) and match.group() in ("true", "false", "null"):
        literal = {"true": True, "false": False, "null": None}[match.group()]
        end = match.end()
    else:
        end = _expression_end(text, pos)
        return Expression(text[pos:end].strip()), end
    after = _skip_space(text, end, newlines=False)
    if after >= len(text) or text[after] in "\n,}]":
        return literal, end
    end = _expression_end(text, pos)  # e.g. 'a' == b ? x : y
    return Expression(text[pos:end].strip()), end


def _parse_object(text: str, pos: int) -> tuple[dict[str, Any], int]:
    result: dict[str, Any] = {}
    pos += 1
    while True:
        pos = _skip_space(text, pos)
        while pos < len(text) and text[pos] == ",":
            pos = _skip_space(text, pos + 1)
        if pos >= len(text):
            raise BicepReadError("unterminated object")
        if text[pos] == "}":
            return result, pos + 1
        if text[pos] == "'":
            end = _string_end(text, pos)
            decoded = _decode_string(text[pos:end])
            # An interpolated key (an identity resource id) is kept as its source text.
            key = decoded if isinstance(decoded, str) else text[pos + 1 : end - 1]
        elif match := _IDENT.match(text, pos):
            key, end = match.group(), match.end()
        else:
            raise BicepReadError(f"object key expected at offset {pos}: {text[pos : pos + 30]!r}")
        pos = _skip_space(text, end, newlines=False)
        if pos >= len(text) or text[pos] != ":":
            raise BicepReadError(f"':' expected after key {key!r}")
        if key in result:
            raise BicepReadError(f"duplicate key {key!r}")
        result[key], pos = parse_value(text, pos + 1)


def _parse_array(text: str, pos: int) -> tuple[list[Any], int]:
    result: list[Any] = []
    pos += 1
    while True:
        pos = _skip_space(text, pos)
        while pos < len(text) and text[pos] == ",":
            pos = _skip_space(text, pos + 1)
        if pos >= len(text):
            raise BicepReadError("unterminated array")
        if text[pos] == "]":
            return result, pos + 1
        item, pos = parse_value(text, pos)
        result.append(item)


# --- statements -------------------------------------------------------------------------


def read(path: Path) -> str:
    """The text of a template; a missing file is an error, not an empty template."""
    if not path.is_file():
        raise BicepReadError(f"{path} does not exist")
    return path.read_text(encoding="utf-8")


def variables(text: str) -> dict[str, Any]:
    """Every top-level ``var name = value`` of a template, parsed."""
    found: dict[str, Any] = {}
    for match in re.finditer(r"^var\s+(\w+)\s*=\s*", text, re.MULTILINE):
        value, _ = parse_value(text, match.end())
        found[match.group(1)] = value
    return found


def variable(text: str, name: str) -> Any:
    """One variable; raises if the template does not declare it."""
    found = variables(text)
    if name not in found:
        raise BicepReadError(f"var {name} is not declared")
    return found[name]


def params(text: str) -> dict[str, Param]:
    """Every ``param`` with its type, default and the decorators written above it."""
    found: dict[str, Param] = {}
    pattern = re.compile(r"^param\s+(\w+)\s+(\w+)(\s*=\s*)?", re.MULTILINE)
    for match in pattern.finditer(text):
        param = Param(name=match.group(1), type=match.group(2))
        if match.group(3):
            param.default, _ = parse_value(text, match.end())
            param.has_default = True
        block: list[str] = []
        for line in reversed(text[: match.start()].splitlines()):
            if not line.strip() or not line.startswith(("@", " ", "\t", "]", ")", "'")):
                break
            block.insert(0, line.strip())
        decorators: list[str] = []
        for line in block:
            if line.startswith("@"):
                decorators.append(line)
            elif decorators:
                decorators[-1] += "\n" + line
        param.decorators = decorators
        found[param.name] = param
    return found


def resources(text: str) -> list[Resource]:
    """Every ``resource`` statement, with its body parsed (loop and ``if`` bodies too)."""
    found: list[Resource] = []
    pattern = re.compile(
        r"^resource\s+(\w+)\s+'([^'@]+)@([^']+)'\s*(existing\s*)?=\s*", re.MULTILINE
    )
    for match in pattern.finditer(text):
        pos = match.end()
        is_loop = False
        if text.startswith("[", pos):
            is_loop = True
            colon = re.compile(r"\bfor\b[^:]*:\s*").search(text, pos)
            if colon is None:
                raise BicepReadError(f"cannot read the loop of resource {match.group(1)}")
            pos = colon.end()
        elif text.startswith("if", pos):
            pos = text.index("{", pos)
        pos = _skip_space(text, pos)
        if text[pos] != "{":
            raise BicepReadError(f"resource {match.group(1)} has no object body")
        body, _ = _parse_object(text, pos)
        found.append(
            Resource(
                symbol=match.group(1),
                type=match.group(2),
                api_version=match.group(3),
                body=body,
                is_loop=is_loop,
                existing=bool(match.group(4)),
            )
        )
    return found


def resources_of_type(text: str, resource_type: str) -> list[Resource]:
    """Resources declared (not ``existing``) with the given type, case-insensitively."""
    return [
        resource
        for resource in resources(text)
        if resource.type.lower() == resource_type.lower() and not resource.existing
    ]


def module_params(text: str, symbol: str) -> dict[str, Any]:
    """The ``params`` object of ``module <symbol> '<file>' = { ... }``."""
    match = re.search(rf"^module\s+{symbol}\s+'[^']+'\s*=\s*", text, re.MULTILINE)
    if match is None:
        raise BicepReadError(f"module {symbol} is not declared")
    body, _ = parse_value(text, match.end())
    if not isinstance(body, dict) or "params" not in body:
        raise BicepReadError(f"module {symbol} has no params object")
    module_parameters: dict[str, Any] = body["params"]
    return module_parameters


def outputs(text: str) -> dict[str, str]:
    """Every one-line ``output name type = value``: name -> the value's source text."""
    pattern = re.compile(r"^output\s+(\w+)\s+\w+\s*=\s*(.+)$", re.MULTILINE)
    return {match.group(1): match.group(2).strip() for match in pattern.finditer(text)}


def imports(text: str) -> dict[str, str]:
    """``import { a, b } from 'file.bicep'`` statements: imported name -> file."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^import\s*\{([^}]*)\}\s*from\s*'([^']+)'", text, re.MULTILINE):
        for name in match.group(1).split(","):
            if name.strip():
                found[name.strip()] = match.group(2)
    return found


def constants(path: Path) -> dict[str, Any]:
    """Variables and literal param defaults visible in a template, imports included."""
    text = read(path)
    known: dict[str, Any] = {}
    for name, source in imports(text).items():
        imported = variables(read(path.parent / source))
        if name in imported:
            known[name] = imported[name]
    for name, param in params(text).items():
        if param.has_default:
            known[name] = param.default
    known.update(variables(text))
    return known


# --- evaluation -------------------------------------------------------------------------


class Unresolved(Exception):
    """An expression depends on something only known at deployment time."""


def _lookup(reference: str, known: dict[str, Any]) -> Any:
    tokens = re.findall(r"[A-Za-z_]\w*|\[\d+\]", reference)
    if tokens[0] not in known:
        raise Unresolved(reference)
    value = known[tokens[0]]
    for token in tokens[1:]:
        value = resolve(value, known)
        if token.startswith("["):
            value = value[int(token[1:-1])]
        elif isinstance(value, dict) and token in value:
            value = value[token]
        else:
            raise Unresolved(reference)
    return resolve(value, known)


def resolve(value: Any, known: dict[str, Any]) -> Any:
    """Replace references to known constants by their values, recursively.

    Raises :class:`Unresolved` for anything computed at deployment time (function calls,
    resource properties, parameters without defaults).
    """
    if isinstance(value, Expression):
        if _REFERENCE.match(value.text):
            return _lookup(value.text, known)
        if match := re.fullmatch(r"string\((.+)\)", value.text):
            inner = resolve(Expression(match.group(1).strip()), known)
            return str(inner).lower() if isinstance(inner, bool) else str(inner)
        raise Unresolved(value.text)
    if isinstance(value, Interpolated):
        return "".join(
            part if isinstance(part, str) else str(resolve(part, known)) for part in value.parts
        )
    if isinstance(value, dict):
        return {key: resolve(item, known) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve(item, known) for item in value]
    return value


def bicep_files() -> list[Path]:
    """Every Bicep template of the repository's infrastructure."""
    return sorted(INFRA.rglob("*.bicep"))
