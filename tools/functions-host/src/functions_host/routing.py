"""Route templates of HTTP triggers, matched as the host's ASP.NET routing does.

Supported: literal segments (case-insensitive), ``{name}``, constraints ``{id:int}``
(``int``, ``long``, ``bool``, ``alpha``, ``guid``, ``float``, ``double``, ``decimal``,
``datetime``; other constraints accept any value), optional trailing parameters
``{name?}`` and the catch-all ``{*rest}``. Literal segments win over parameters when two
templates match, as in ASP.NET.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_CONSTRAINT_PATTERNS = {
    "int": r"-?\d+",
    "long": r"-?\d+",
    "bool": r"(?i:true|false)",
    "alpha": r"[A-Za-z]+",
    "guid": r"[{(]?[0-9A-Fa-f]{8}-?(?:[0-9A-Fa-f]{4}-?){3}[0-9A-Fa-f]{12}[)}]?",
    "float": r"-?\d+(?:\.\d+)?",
    "double": r"-?\d+(?:\.\d+)?",
    "decimal": r"-?\d+(?:\.\d+)?",
    "datetime": r"[0-9][0-9:.\-T+Z ]*",
}
_PARAMETER = re.compile(r"^\{(?P<star>\*{1,2})?(?P<name>[A-Za-z_]\w*)(?P<rest>[^}]*)\}$")


class RouteTemplateError(ValueError):
    """A route template this host cannot compile."""


def _segment_pattern(segment: str) -> tuple[str, bool, bool]:
    """Regex for one segment, whether it is optional, whether it is a literal."""
    match = _PARAMETER.match(segment)
    if match is None:
        if "{" in segment or "}" in segment:
            raise RouteTemplateError(f"unsupported route segment {segment!r}")
        return re.escape(segment), False, True
    name, rest = match["name"], match["rest"]
    if match["star"]:
        return f"(?P<{name}>.*)", True, False
    optional = rest.endswith("?")
    rest = rest.rstrip("?")
    if "=" in rest:  # a default value: treat as optional
        rest, optional = rest.split("=", 1)[0], True
    pattern = "[^/]+"
    for constraint in filter(None, rest.split(":")):
        base = constraint.split("(", 1)[0].lower()
        pattern = _CONSTRAINT_PATTERNS.get(base, pattern)
    return f"(?P<{name}>{pattern})", optional, False


@dataclass(frozen=True)
class Route[T]:
    template: str
    regex: re.Pattern[str]
    methods: frozenset[str] | None
    literal_segments: int
    target: T

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if self.methods is not None and method.upper() not in self.methods:
            return None
        found = self.regex.fullmatch(path)
        if found is None:
            return None
        return {key: value for key, value in found.groupdict().items() if value is not None}


def compile_route[T](
    template: str, methods: list[str] | None, target: T, prefix: str = ""
) -> Route[T]:
    """Compile ``template`` under ``prefix`` (both without leading or trailing slashes)."""
    segments = [s for s in f"{prefix}/{template}".split("/") if s]
    pattern = ""
    literals = 0
    for segment in segments:
        segment_regex, optional, literal = _segment_pattern(segment)
        literals += literal
        pattern += f"(?:/{segment_regex})?" if optional else f"/{segment_regex}"
    regex = re.compile(pattern or "/", re.IGNORECASE)
    allowed = frozenset(m.upper() for m in methods) if methods else None
    return Route(template, regex, allowed, literals, target)


class RouteTable[T]:
    """Routes in ASP.NET precedence order: more literal segments first."""

    def __init__(self) -> None:
        self._routes: list[Route[T]] = []

    def add(self, route: Route[T]) -> None:
        self._routes.append(route)
        self._routes.sort(key=lambda r: (-r.literal_segments, r.template))

    def __iter__(self) -> Iterator[Route[T]]:
        return iter(self._routes)

    def find(self, method: str, path: str) -> tuple[T, dict[str, str]] | None:
        normalized = "/" + path.strip("/")
        for route in self._routes:
            params = route.match(method, normalized)
            if params is not None:
                return route.target, params
        return None
