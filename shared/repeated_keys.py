"""JSON files the deployment is configured by, read so that no key given twice passes.

``json.loads`` keeps the last of two equal keys in one object without a word: a model
catalog declaring an alias twice would serve only the second, a tenant catalog naming a
tenant twice would grant only the second's weight. ``parse_noting_repeats`` parses the
text and says where the first repeated key is, so that each catalog refuses it in its
own words (the file, the entry and the field).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RepeatedKey:
    """The first key given twice: the location of its object (keys and list indexes from
    the top, outer first) and the key."""

    location: tuple[str, ...]
    key: str


def parse_noting_repeats(text: str) -> tuple[Any, RepeatedKey | None]:
    """The JSON document of ``text`` and its first repeated key (None when every object
    gives each key once); ``json.JSONDecodeError`` when it is not JSON."""
    repeated: dict[int, tuple[dict[str, Any], str]] = {}  # id(object) -> it, its first

    def object_of(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        made: dict[str, Any] = {}
        for key, value in pairs:
            if key in made and id(made) not in repeated:
                repeated[id(made)] = (made, key)  # kept alive: its id is not reused
            made[key] = value
        return made

    raw = json.loads(text, object_pairs_hook=object_of)
    return raw, (_first_repeated(raw, repeated, ()) if repeated else None)


def _first_repeated(
    value: Any, repeated: Mapping[int, tuple[dict[str, Any], str]], location: tuple[str, ...]
) -> RepeatedKey | None:
    """Where the first key given twice is, outer first."""
    if isinstance(value, dict):
        twice = repeated.get(id(value))
        if twice is not None and twice[0] is value:
            return RepeatedKey(location, twice[1])
        items = [(str(key), item) for key, item in value.items()]
    elif isinstance(value, list):
        items = [(str(index), item) for index, item in enumerate(value)]
    else:
        return None
    for name, item in items:
        found = _first_repeated(item, repeated, (*location, name))
        if found is not None:
            return found
    return None
