"""The Bicep reader itself: it must read what the templates use and refuse what it cannot."""

import pytest

from tests.infra import (
    BicepReadError,
    Expression,
    Interpolated,
    Unresolved,
    params,
    parse_value,
    resolve,
    resources,
    variables,
)

SAMPLE = """
import { names } from 'other.bicep'

@description('How many.')
@allowed([
  1
  2
])
param count int = 2

param location string

var settings = {
  // a comment
  Plain: 'text'
  Escaped: 'priority = \\'high\\''
  Number: 42
  Flag: false
  Interpolated: '${names.first},${names.second}'
  Call: string(count)
  Ternary: count > 1
    ? 'many'
    : 'one'
  List: [
    'a'
    'b'
  ]
}

resource things 'Microsoft.Example/things@2024-01-01' = [
  for (item, i) in items: {
    name: item.name
    properties: item.properties
  }
]

resource conditional 'Microsoft.Example/others@2024-01-01' = if (count > 1) {
  name: 'other'
}

resource parent 'Microsoft.Example/parents@2024-01-01' existing = {
  name: 'parent'
}
"""


def test_reads_literals_and_keeps_expressions() -> None:
    settings = variables(SAMPLE)["settings"]
    assert settings["Plain"] == "text"
    assert settings["Escaped"] == "priority = 'high'"
    assert settings["Number"] == 42
    assert settings["Flag"] is False
    assert settings["Call"] == Expression("string(count)")
    assert settings["Ternary"].text.startswith("count > 1")
    assert settings["List"] == ["a", "b"]
    assert isinstance(settings["Interpolated"], Interpolated)


def test_resolves_references_and_interpolation() -> None:
    known = {"names": {"first": "incoming", "second": "inputs"}}
    settings = variables(SAMPLE)["settings"]
    assert resolve(settings["Interpolated"], known) == "incoming,inputs"
    with pytest.raises(Unresolved):
        resolve(settings["Call"], known)


def test_reads_params_with_decorators_and_defaults() -> None:
    found = params(SAMPLE)
    assert found["count"].default == 2
    assert any(d.startswith("@allowed") for d in found["count"].decorators)
    assert found["location"].has_default is False


def test_reads_loop_conditional_and_existing_resources() -> None:
    by_symbol = {resource.symbol: resource for resource in resources(SAMPLE)}
    assert by_symbol["things"].is_loop
    assert by_symbol["things"].body["properties"] == Expression("item.properties")
    assert by_symbol["conditional"].body["name"] == "other"
    assert by_symbol["parent"].existing
    assert by_symbol["things"].api_version == "2024-01-01"


@pytest.mark.parametrize(
    "broken",
    [
        "{\n  key: 'unterminated\n}",
        "{\n  key: 'value'\n",
        "{\n  key 'value'\n}",
        "{\n  key: 'a'\n  key: 'b'\n}",
    ],
)
def test_refuses_what_it_cannot_read(broken: str) -> None:
    with pytest.raises(BicepReadError):
        parse_value(broken, 0)
