"""Documents read a few at a time, for the reports that read many (the jobs' and the
usage ledger's).

A report reads its documents concurrently, ``readers`` at a time, and yields them in
the order it asked for them; the first storage failure stops the whole report (a
partial sum would read as a complete one), and the reads not started yet are cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor


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
