"""The outcome table in code (``shared.processing.outcomes.ROWS`` and the happy path's
rows) is the table of docs/processing.md, row for row, and every row can be reached."""

from __future__ import annotations

import re
from pathlib import Path

from shared.errors import CapacityExhausted, InvalidInput, InvalidPayload, TransientError
from shared.processing.outcomes import (
    JOB_ENDED_BEFORE,
    ROWS,
    SETTLEMENT_FAILED,
    UNEXPECTED,
    Row,
)
from shared.processing.pipeline import SETTLED_ON_THE_HAPPY_PATH

PAGE = Path(__file__).resolve().parents[2] / "docs" / "processing.md"


def page_situations(markdown: str) -> list[str]:
    """The first cells of the table under "## The outcome table"."""
    section = markdown.split("## The outcome table", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    cells = [re.split(r"(?<!\\)\|", row)[1].strip() for row in rows]
    return [cell for cell in cells if cell != "situation"]


def code_situations() -> list[str]:
    rows = (*ROWS, JOB_ENDED_BEFORE, SETTLEMENT_FAILED)
    return [s for row in rows for s in row.situations] + list(SETTLED_ON_THE_HAPPY_PATH)


def differences(page: list[str], code: list[str]) -> dict[str, list[str]]:
    """What one side has and the other lacks (and what either lists twice)."""
    return {
        "only on the page": [s for s in page if s not in code],
        "only in the code": [s for s in code if s not in page],
        "twice": sorted({s for s in page + code if page.count(s) > 1 or code.count(s) > 1}),
    }


def test_the_code_settles_by_the_table_of_the_page() -> None:
    page = page_situations(PAGE.read_text(encoding="utf-8"))
    assert len(page) >= 20, "the page's table was not found"
    found = differences(page, code_situations())
    assert found == {"only on the page": [], "only in the code": [], "twice": []}


def test_a_row_missing_on_either_side_is_reported() -> None:
    page = page_situations(PAGE.read_text(encoding="utf-8"))
    code = code_situations()
    found = differences(page[1:], [*code, "a situation nobody wrote down"])
    assert found["only in the code"] == [page[0], "a situation nobody wrote down"]
    assert differences([*page, page[0]], code)["twice"] == [page[0]]


def shadowed(rows: tuple[Row, ...]) -> list[str]:
    """Rows that an earlier, more general row hides (the table is read top down)."""
    hidden = []
    for index, row in enumerate(rows):
        for earlier in rows[:index]:
            overlaps = row.readable is None or earlier.readable in (None, row.readable)
            if overlaps and issubclass(row.catches, earlier.catches):
                hidden.append(f"{earlier.catches.__name__} hides {row.catches.__name__}")
    return hidden


def test_every_row_is_reached_by_its_own_exception() -> None:
    """Most specific first: no earlier row catches what a later row is for."""
    assert shadowed(ROWS) == []
    assert ROWS[-1] is UNEXPECTED, "anything else is unexpected, and that row comes last"


def test_a_row_behind_a_more_general_one_is_reported() -> None:
    transient = next(row for row in ROWS if row.catches is TransientError)
    capacity = next(row for row in ROWS if row.catches is CapacityExhausted)
    assert shadowed((transient, capacity)) == ["TransientError hides CapacityExhausted"]
    assert shadowed((capacity, transient)) == []


def test_an_unreadable_message_and_a_request_have_rows_of_their_own() -> None:
    """``InvalidPayload`` of a message that is no request is dead-lettered as such; the
    same exception from a readable request is a door's rule broken (``InvalidInput``)."""
    unreadable = next(row for row in ROWS if row.readable is False)
    refused = next(row for row in ROWS if row.catches is InvalidInput)
    assert unreadable.catches is InvalidPayload
    assert shadowed((unreadable, refused)) == []
