"""Event subscription filters: ``includedEventTypes`` and the advanced ``filters``.

Namespace subscriptions filter on CloudEvents attributes (``subject``, ``type``,
``source``, extensions) and on ``data.<path>``; every operator of Event Grid's advanced
filtering is evaluated as documented: values of one filter are OR-ed, filters are AND-ed,
string comparisons ignore case, key values of another type than the operator's are
ignored, an array key matches element by element, and a missing key matches only the
``...NotIn``/``NotInRange`` operators and ``IsNullOrUndefined``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_FILTERS = 25
_MISSING = object()
_ALIASES = {"eventid": "id", "eventtype": "type"}


class FilterError(ValueError):
    """A filter in the configuration is not one Event Grid accepts."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_string(value: Any) -> bool:
    return isinstance(value, str)


def _string_test(test: Callable[[str, str], bool]) -> Callable[[Any, Any], bool]:
    return lambda key, wanted: test(key.casefold(), str(wanted).casefold())


# Positive operators: the key matches when any (filter value, key value) pair passes.
# Their "Not" twins fail as soon as one pair passes. Each entry: the key values' type
# check and the pair test.
_PAIR_TESTS: dict[str, tuple[Callable[[Any], bool], Callable[[Any, Any], bool]]] = {
    "NumberIn": (_is_number, lambda k, w: float(k) == float(w)),
    "NumberLessThan": (_is_number, lambda k, w: float(k) < float(w)),
    "NumberGreaterThan": (_is_number, lambda k, w: float(k) > float(w)),
    "NumberLessThanOrEquals": (_is_number, lambda k, w: float(k) <= float(w)),
    "NumberGreaterThanOrEquals": (_is_number, lambda k, w: float(k) >= float(w)),
    "NumberInRange": (_is_number, lambda k, w: float(w[0]) <= float(k) <= float(w[1])),
    "BoolEquals": (lambda v: isinstance(v, bool), lambda k, w: k is w),
    "StringIn": (_is_string, _string_test(lambda k, w: k == w)),
    "StringContains": (_is_string, _string_test(lambda k, w: w in k)),
    "StringBeginsWith": (_is_string, _string_test(lambda k, w: k.startswith(w))),
    "StringEndsWith": (_is_string, _string_test(lambda k, w: k.endswith(w))),
}
_NEGATED = {
    "NumberNotIn": "NumberIn",
    "NumberNotInRange": "NumberInRange",
    "StringNotIn": "StringIn",
    "StringNotContains": "StringContains",
    "StringNotBeginsWith": "StringBeginsWith",
    "StringNotEndsWith": "StringEndsWith",
}
_MATCH_WHEN_MISSING = {"NumberNotIn", "NumberNotInRange", "StringNotIn"}
_SINGLE_VALUE = {
    "NumberLessThan",
    "NumberGreaterThan",
    "NumberLessThanOrEquals",
    "NumberGreaterThanOrEquals",
    "BoolEquals",
}
_NO_VALUE = {"IsNullOrUndefined", "IsNotNull"}
OPERATORS = frozenset(_PAIR_TESTS) | frozenset(_NEGATED) | _NO_VALUE


def resolve_key(event: Mapping[str, Any], key: str) -> Any:
    """The value ``key`` names in a CloudEvent (attributes by name, ``data.a.b``), or _MISSING."""
    head, _, rest = key.partition(".")
    lowered = _ALIASES.get(head.lower(), head.lower())
    current: Any = _MISSING
    for name, value in event.items():
        if name.lower() == lowered:
            current = value
            break
    for part in rest.split(".") if rest else ():
        if not isinstance(current, Mapping):
            return _MISSING
        if part in current:
            current = current[part]
            continue
        current = next((v for k, v in current.items() if k.lower() == part.lower()), _MISSING)
    return current


@dataclass(frozen=True)
class Condition:
    """One advanced filter: ``operatorType``, ``key`` and its value(s)."""

    operator: str
    key: str
    values: tuple[Any, ...] = ()

    def matches(self, event: Mapping[str, Any]) -> bool:
        found = resolve_key(event, self.key)
        absent = found is _MISSING or found is None
        if self.operator == "IsNullOrUndefined":
            return absent
        if self.operator == "IsNotNull":
            return not absent
        if absent:
            return self.operator in _MATCH_WHEN_MISSING
        keys = found if isinstance(found, list) else [found]
        positive = _NEGATED.get(self.operator, self.operator)
        accepts, test = _PAIR_TESTS[positive]
        hit = any(test(k, w) for w in self.values for k in keys if accepts(k))
        return not hit if self.operator in _NEGATED else hit


@dataclass(frozen=True)
class SubscriptionFilter:
    """What a subscription takes from its topic."""

    included_event_types: tuple[str, ...] = ()
    conditions: tuple[Condition, ...] = ()

    def matches(self, event: Mapping[str, Any]) -> bool:
        if self.included_event_types:
            event_type = str(event.get("type", "")).casefold()
            if event_type not in self.included_event_types:
                return False
        return all(condition.matches(event) for condition in self.conditions)


def _condition(raw: Mapping[str, Any]) -> Condition:
    operator = str(raw.get("operatorType", ""))
    if operator not in OPERATORS:
        raise FilterError(f"unknown operatorType {operator!r}")
    key = raw.get("key")
    if not isinstance(key, str) or not key:
        raise FilterError(f"{operator}: a key is required")
    if operator in _NO_VALUE:
        return Condition(operator, key)
    if operator in _SINGLE_VALUE:
        if "value" not in raw:
            raise FilterError(f"{operator} on {key}: a value is required")
        values: Any = [raw["value"]]
    else:
        values = raw.get("values")
        if not isinstance(values, Sequence) or isinstance(values, str) or not values:
            raise FilterError(f"{operator} on {key}: values must be a non-empty list")
    if not all(_valid_value(operator, value) for value in values):
        raise FilterError(f"{operator} on {key}: {values!r} are not values of its type")
    return Condition(operator, key, tuple(values))


def _valid_value(operator: str, value: Any) -> bool:
    if operator.endswith("InRange"):
        return (
            isinstance(value, Sequence)
            and len(value) == 2
            and all(_is_number(n) for n in value)
            and value[0] <= value[1]
        )
    if operator.startswith("Number"):
        return _is_number(value)
    if operator == "BoolEquals":
        return isinstance(value, bool)
    return _is_string(value)


def parse_filter(
    included_event_types: Sequence[str], filters: Sequence[Mapping[str, Any]]
) -> SubscriptionFilter:
    """A subscription's ``filtersConfiguration`` checked and compiled."""
    if len(filters) > MAX_FILTERS:
        raise FilterError(f"at most {MAX_FILTERS} filters per subscription")
    return SubscriptionFilter(
        included_event_types=tuple(str(t).casefold() for t in included_event_types),
        conditions=tuple(_condition(raw) for raw in filters),
    )
