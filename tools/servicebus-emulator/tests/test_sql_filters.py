"""The SQL filter grammar, evaluated directly (the fan-out tests cover it end to end)."""

from __future__ import annotations

from typing import Any

import pytest

from servicebus_emulator.sql import MISSING, SqlError, compile_action, compile_filter

pytestmark = pytest.mark.emulator

USER = {
    "priority": "high",
    "n": 5,
    "ratio": 2.5,
    "review_required": True,
    "name": "a_b%c",
    "nothing": None,
}
SYSTEM = {"label": "invoice-7", "messageid": "m-1"}


def lookup(scope: str, name: str) -> Any:
    if scope == "sys":
        return SYSTEM.get(name.lower(), MISSING)
    return USER.get(name, MISSING)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("priority = 'high'", True),
        ("priority <> 'high'", False),
        ("priority != 'low'", True),
        ("review_required = TRUE", True),
        ("review_required = FALSE", False),
        ("1=1", True),
        ("1=0", False),
        ("n > 3 AND n * 2 = 10", True),
        ("n >= 6 OR ratio < 3", True),
        ("NOT (n = 5)", False),
        ("(n - 1) % 2 = 0", True),
        ("n / 2 = 2", True),
        ("ratio = 2.5", True),
        ("n = 5.0", True),
        ("-n < 0", True),
        ("missing = 1", False),
        ("NOT missing = 1", False),  # unknown stays unknown
        ("missing = 1 OR n = 5", True),
        ("missing = 1 AND n = 5", False),
        ("missing IS NULL", True),
        ("nothing IS NULL", True),
        ("priority IS NOT NULL", True),
        ("EXISTS(priority)", True),
        ("EXISTS(missing)", False),
        ("name LIKE 'a%'", True),
        ("name LIKE 'a_b%'", True),
        ("name LIKE 'a!_b!%c' ESCAPE '!'", True),
        ("name LIKE 'a!_x%' ESCAPE '!'", False),
        ("name NOT LIKE 'z%'", True),
        ("priority IN ('low', 'high')", True),
        ("priority NOT IN ('high')", False),
        ("sys.Label LIKE 'invoice%'", True),
        ("sys.MessageId = 'm-1'", True),
        ("user.n = 5", True),
        ("[priority] = 'high'", True),
        ("priority = 'it''s'", False),
        ("'a' + 'b' = 'ab'", True),
        ("n = 'five'", False),  # incompatible types compare as unknown
    ],
)
def test_filter_expressions(expression: str, expected: bool) -> None:
    assert compile_filter(expression)(lookup) is expected


@pytest.mark.parametrize(
    "broken", ["priority =", "n > > 1", "LIKE 'x'", "a IN ()", "(n = 1", "n = 'unterminated"]
)
def test_invalid_filters_are_rejected(broken: str) -> None:
    with pytest.raises(SqlError):
        compile_filter(broken)


def test_actions_set_and_remove_user_properties() -> None:
    action = compile_action("SET bumped = n + 1; SET tag = 'seen'; REMOVE priority")
    result = action(lookup, USER)
    assert result["bumped"] == 6
    assert result["tag"] == "seen"
    assert "priority" not in result
    with pytest.raises(SqlError):
        compile_action("SET sys.Label = 'x'")
