"""JSON files the deployment is configured by, read so that no key given twice passes.

``json.loads`` keeps the last of two equal keys in one object without a word: a model
catalog declaring an alias twice would serve only the second, a tenant catalog naming a
tenant twice would grant only the second's weight. ``parse_noting_repeats`` parses the
text and says where the first repeated key is; ``read_catalog_json`` refuses such a file,
or one that is not JSON, naming the file, the entry and the field as each catalog names
them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.errors import CatalogError

# Where a catalog's error points: the entry and the field of a location in its document.
Locate = Callable[[tuple[int | str, ...]], tuple[str | None, str | None]]


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


def read_catalog_json(
    text: str,
    source: str,
    *,
    error: type[CatalogError],
    locate: Locate,
    kinds: Mapping[str, str],
) -> Any:
    """A catalog file's JSON (``source`` names it), refused with ``error`` when it is not
    JSON or gives a key twice in one object. ``kinds`` names what the top-level
    collections hold (``{"models": "alias"}``), so an entry declared twice is said so."""
    try:
        raw, found = parse_noting_repeats(text)
    except json.JSONDecodeError as failure:
        raise error(
            f"not valid JSON: {failure.msg} (line {failure.lineno}, column {failure.colno})",
            file=source,
        ) from None
    if found is not None:
        entry, field = locate((*found.location, found.key))
        kind = kinds.get(found.location[0]) if len(found.location) == 1 else None
        message = (
            f'declared twice in "{found.location[0]}"; declare each {kind} once'
            if kind is not None
            else "given twice; give each key once"
        )
        raise error(
            f"{message} (JSON would keep only the last)", file=source, entry=entry, field=field
        )
    return raw
