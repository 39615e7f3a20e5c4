"""The Service Bus SQL filter and rule-action language, compiled to Python closures.

Supported: comparisons (= <> != < <= > >=), AND/OR/NOT with SQL three-valued logic (a
comparison with NULL is unknown and an unknown filter does not match), [NOT] LIKE with
ESCAPE, [NOT] IN, IS [NOT] NULL, EXISTS(prop), + - * / % and unary minus, string,
integer, decimal and float literals, TRUE/FALSE/NULL, ``sys.``-prefixed system
properties, ``user.``-prefixed or bare application properties, and [bracketed] names.
Actions: ``SET name = expr`` and ``REMOVE name`` statements separated by ``;``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .sql_values import (
    MISSING,
    Expr,
    Lookup,
    SqlError,
    Token,
    arith,
    binary,
    compare,
    like_pattern,
    split_name,
    tokenize,
    truth,
)

__all__ = ["MISSING", "Lookup", "SqlError", "Token", "compile_action", "compile_filter"]


class Parser:
    """Recursive descent over the token list; every rule returns a closure."""

    def __init__(self, text: str) -> None:
        self.tokens = tokenize(text)
        self.index = 0

    def peek(self, offset: int = 0) -> Token:
        return self.tokens[min(self.index + offset, len(self.tokens) - 1)]

    def take(self) -> Token:
        token = self.peek()
        self.index += 1
        return token

    def accept(self, kind: str, text: str | None = None) -> bool:
        token = self.peek()
        if token.kind == kind and (text is None or token.text == text):
            self.index += 1
            return True
        return False

    def expect(self, kind: str, text: str | None = None) -> Token:
        token = self.peek()
        if not self.accept(kind, text):
            raise SqlError(f"expected {text or kind}, found {token.text or 'end'!r}")
        return token

    def parse_filter(self) -> Expr:
        expr = self.or_expr()
        self.expect("end")
        return expr

    def or_expr(self) -> Expr:
        left = self.and_expr()
        while self.accept("kw", "OR"):
            right, prev = self.and_expr(), left

            def either(get: Lookup, a: Expr = prev, b: Expr = right) -> bool | None:
                x, y = truth(a(get)), truth(b(get))
                return True if x or y else None if x is None or y is None else False

            left = either
        return left

    def and_expr(self) -> Expr:
        left = self.not_expr()
        while self.accept("kw", "AND"):
            right, prev = self.not_expr(), left

            def both(get: Lookup, a: Expr = prev, b: Expr = right) -> bool | None:
                x, y = truth(a(get)), truth(b(get))
                return (
                    False if x is False or y is False else None if x is None or y is None else True
                )

            left = both
        return left

    def not_expr(self) -> Expr:
        if self.accept("kw", "NOT"):
            inner = self.not_expr()

            def negate(get: Lookup) -> bool | None:
                value = truth(inner(get))
                return None if value is None else not value

            return negate
        return self.predicate()

    def predicate(self) -> Expr:
        if self.accept("kw", "EXISTS"):
            self.expect("op", "(")
            scope, name = split_name(self.expect("name").text)
            self.expect("op", ")")
            return lambda get: get(scope, name) is not MISSING
        left = self.additive()
        token = self.peek()
        if token.kind == "op" and token.text in ("=", "<>", "!=", "<", "<=", ">", ">="):
            self.take()
            right = self.additive()
            return lambda get: compare(token.text, left(get), right(get))
        if token.kind == "kw" and token.text == "IS":
            self.take()
            negated = self.accept("kw", "NOT")
            self.expect("kw", "NULL")
            return lambda get: (left(get) in (None, MISSING)) != negated
        negated = self.accept("kw", "NOT")
        if self.accept("kw", "LIKE"):
            pattern = self.string_literal()
            escape = self.string_literal() if self.accept("kw", "ESCAPE") else None
            regex = like_pattern(pattern, escape)

            def like(get: Lookup) -> bool | None:
                value = left(get)
                if not isinstance(value, str):
                    return None
                return bool(regex.match(value)) != negated

            return like
        if self.accept("kw", "IN"):
            self.expect("op", "(")
            items = [self.additive()]
            while self.accept("op", ","):
                items.append(self.additive())
            self.expect("op", ")")

            def member(get: Lookup) -> bool | None:
                value = left(get)
                if value in (None, MISSING):
                    return None
                found = any(compare("=", value, item(get)) for item in items)
                return found != negated

            return member
        if negated:
            raise SqlError("NOT must be followed by LIKE or IN here")
        return left

    def string_literal(self) -> str:
        return self.expect("str").text[1:-1].replace("''", "'")

    def additive(self) -> Expr:
        left = self.multiplicative()
        while self.peek().kind == "op" and self.peek().text in ("+", "-"):
            op, right, prev = self.take().text, self.multiplicative(), left
            left = binary(op, prev, right)
        return left

    def multiplicative(self) -> Expr:
        left = self.unary()
        while self.peek().kind == "op" and self.peek().text in ("*", "/", "%"):
            op, right, prev = self.take().text, self.unary(), left
            left = binary(op, prev, right)
        return left

    def unary(self) -> Expr:
        if self.accept("op", "-"):
            inner = self.unary()
            return lambda get: arith("-", 0, inner(get))
        if self.accept("op", "+"):
            return self.unary()
        return self.primary()

    def primary(self) -> Expr:
        token = self.take()
        if token.kind == "op" and token.text == "(":
            inner = self.or_expr()
            self.expect("op", ")")
            return inner
        if token.kind == "num":
            is_float = any(c in token.text for c in ".eE")
            number: Any = float(token.text) if is_float else int(token.text)
            return lambda get: number
        if token.kind == "str":
            text = token.text[1:-1].replace("''", "'")
            return lambda get: text
        if token.kind == "kw" and token.text in ("TRUE", "FALSE", "NULL"):
            constant = {"TRUE": True, "FALSE": False, "NULL": None}[token.text]
            return lambda get: constant
        if token.kind == "name":
            scope, name = split_name(token.text)
            return lambda get: get(scope, name)
        raise SqlError(f"unexpected {token.text or 'end'!r}")

    def parse_action(self) -> list[tuple[str, str, Expr | None]]:
        statements: list[tuple[str, str, Expr | None]] = []
        while self.peek().kind != "end":
            if self.accept("kw", "SET"):
                scope, name = split_name(self.expect("name").text)
                self.expect("op", "=")
                statements.append((scope, name, self.additive()))
            elif self.accept("kw", "REMOVE"):
                scope, name = split_name(self.expect("name").text)
                statements.append((scope, name, None))
            else:
                raise SqlError(f"expected SET or REMOVE, found {self.peek().text!r}")
            if scope != "user":
                raise SqlError("rule actions may only change user properties")
            if not self.accept("op", ";"):
                break
        self.expect("end")
        return statements


def compile_filter(text: str) -> Callable[[Lookup], bool]:
    """A predicate that is True only when the filter evaluates to TRUE (not unknown)."""
    expr = Parser(text).parse_filter()
    return lambda get: expr(get) is True


def compile_action(text: str) -> Callable[[Lookup, Mapping[Any, Any]], dict[Any, Any]]:
    """A function from (lookup, application properties) to the rewritten properties."""
    statements = Parser(text).parse_action()

    def apply(get: Lookup, properties: Mapping[Any, Any]) -> dict[Any, Any]:
        result = dict(properties)
        for _scope, name, expr in statements:
            if expr is None:
                result.pop(name, None)
            else:
                value = expr(get)
                result[name] = None if value is MISSING else value
        return result

    return apply
