"""Tokens and value semantics of the Service Bus SQL language (NULL-aware comparison,
arithmetic and LIKE), shared by the filter/action parser in ``sql.py``."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MISSING: Any = object()
Lookup = Callable[[str, str], Any]  # (scope "sys"|"user", name) -> value or MISSING
Expr = Callable[[Lookup], Any]

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<str>'(?:[^']|'')*')|(?P<br>\[[^\]]+\])|(?P<name>[A-Za-z_$@][\w$@]*(?:\.[A-Za-z_$@][\w$@]*)?)"
    r"|(?P<op><>|!=|<=|>=|[=<>+\-*/%(),;]))"
)
_KEYWORDS = {
    "AND",
    "OR",
    "NOT",
    "LIKE",
    "ESCAPE",
    "IN",
    "IS",
    "NULL",
    "TRUE",
    "FALSE",
    "EXISTS",
    "SET",
    "REMOVE",
}


class SqlError(ValueError):
    """The expression is not valid filter or action syntax."""


@dataclass(frozen=True)
class Token:
    kind: str  # num | str | name | kw | op | end
    text: str


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise SqlError(f"unexpected character at {pos}: {text[pos : pos + 10]!r}")
        pos = match.end()
        kind = match.lastgroup or ""
        value = match.group(kind)
        if kind == "name" and value.upper() in _KEYWORDS:
            tokens.append(Token("kw", value.upper()))
        elif kind == "br":
            tokens.append(Token("name", "user." + value[1:-1]))
        else:
            tokens.append(Token(kind, value))
    tokens.append(Token("end", ""))
    return tokens


def split_name(text: str) -> tuple[str, str]:
    scope, _, name = text.partition(".")
    if name and scope.lower() in ("sys", "user"):
        return scope.lower(), name
    return "user", text


def truth(value: Any) -> bool | None:
    return value if isinstance(value, bool) or value is None else None


def comparable(left: Any, right: Any) -> bool:
    numeric = (int, float)
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool)
    if isinstance(left, numeric) and isinstance(right, numeric):
        return True
    return type(left) is type(right)


def compare(op: str, left: Any, right: Any) -> bool | None:
    if left is None or right is None or left is MISSING or right is MISSING:
        return None
    if not comparable(left, right):
        return None
    if op == "=":
        return bool(left == right)
    if op in ("<>", "!="):
        return bool(left != right)
    if isinstance(left, bool):
        return None
    ops: dict[str, Callable[[Any, Any], bool]] = {
        "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        ">=": lambda a, b: a >= b,
    }
    return ops[op](left, right)


def arith(op: str, left: Any, right: Any) -> Any:
    if left is None or right is None or left is MISSING or right is MISSING:
        return None
    if op == "+" and isinstance(left, str) and isinstance(right, str):
        return left + right
    numeric = (int, float)
    if isinstance(left, bool) or isinstance(right, bool):
        return None
    if not (isinstance(left, numeric) and isinstance(right, numeric)):
        return None
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if right == 0:
        return None
    if op == "/":
        return left // right if isinstance(left, int) and isinstance(right, int) else left / right
    return left % right


def binary(op: str, left: Expr, right: Expr) -> Expr:
    return lambda get: arith(op, left(get), right(get))


def like_pattern(pattern: str, escape: str | None) -> re.Pattern[str]:
    """LIKE: % any run, _ one character, the escape character makes the next literal."""
    out, index = [], 0
    while index < len(pattern):
        char = pattern[index]
        if escape and char == escape and index + 1 < len(pattern):
            out.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        out.append(".*" if char == "%" else "." if char == "_" else re.escape(char))
        index += 1
    return re.compile("^" + "".join(out) + "$", re.DOTALL)
