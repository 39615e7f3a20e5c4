"""Documents read a few at a time, for the reports that read many (the jobs' and the
usage ledger's).

A report reads its documents concurrently, ``readers`` at a time, and yields them in
the order it asked for them; the first storage failure stops the whole report (a
partial sum would read as a complete one), and the reads not started yet are cancelled.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from shared.documents import JsonDocuments


def read_in_order[Read](
    names: list[str], read: Callable[[str], Read], readers: int, thread_prefix: str
) -> Iterator[Read]:
    """``read`` of each of ``names``, in their order, ``readers`` at a time."""
    if not names:
        return
    pool = ThreadPoolExecutor(
        max_workers=min(readers, len(names)), thread_name_prefix=thread_prefix
    )
    try:
        yield from pool.map(read, names)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@dataclass(frozen=True)
class Loaded:
    """One document a report asked for: its JSON object of the expected schema, or why it
    is not one (``problem``); neither when it vanished since it was listed."""

    document: dict[str, Any] | None = None
    problem: str | None = None


def load_of_schema(documents: JsonDocuments, container: str, name: str, schema: str) -> Loaded:
    """``name`` from ``container``, when it is a JSON object whose ``schema`` is ``schema``."""
    try:
        found = documents.load(container, name)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return Loaded(problem="not JSON")
    if found is None:
        return Loaded()
    document, _ = found
    if not isinstance(document, dict):
        return Loaded(problem="not a JSON object")
    if document.get("schema") != schema:
        return Loaded(problem=f"schema {document.get('schema')!r}, not {schema!r}")
    return Loaded(document)
