"""Cursor pages as the SDK's ``SyncCursorPage`` reads them.

``{"object": "list", "data": [...], "first_id", "last_id", "has_more"}``: the SDK asks
for the next page with ``after=<id of the last item>`` while ``has_more`` is true, so a
cursor that names an unknown id is refused (it would otherwise restart the listing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import bad_request


def query_int(query: dict[str, list[str]], name: str, default: int, low: int, high: int) -> int:
    values = query.get(name)
    if not values:
        return default
    try:
        value = int(values[0])
    except ValueError as error:
        raise bad_request(f"'{name}' must be an integer, got {values[0]!r}.") from error
    if not low <= value <= high:
        raise bad_request(f"'{name}' must be between {low} and {high}, got {value}.")
    return value


def cursor_page(items: Sequence[dict[str, Any]], after: str | None, limit: int) -> dict[str, Any]:
    """The page of ``items`` (already ordered) that follows the item ``after``."""
    start = 0
    if after:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise bad_request(f"The 'after' cursor {after!r} names no item of this list.")
        start = ids.index(after) + 1
    page = list(items[start : start + limit])
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(items),
    }
