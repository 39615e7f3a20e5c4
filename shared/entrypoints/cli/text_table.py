"""Aligned text tables for the ops commands' reports: text columns left, numbers right.

The columns of a report are read down, so each is as wide as its widest cell; counts and
amounts are right-aligned so that their digits line up, and trailing blanks are dropped.
"""

from __future__ import annotations


def aligned(grid: list[list[str]], text_columns: int) -> list[str]:
    """``grid``'s rows as lines: the first ``text_columns`` columns left-aligned, the
    others right-aligned, two blanks between columns."""
    widths = [max(len(cells[i]) for cells in grid) for i in range(len(grid[0]))]

    def line(cells: list[str]) -> str:
        padded = [
            cell.ljust(width) if column < text_columns else cell.rjust(width)
            for column, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(padded).rstrip()

    return [line(cells) for cells in grid]
