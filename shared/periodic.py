"""Work an object does every few seconds in a thread of its own, for as long as it lives.

The usage ledger's flush and intake's look at its scheduled requests both run beside the
requests that feed them. The thread holds its object weakly, so services built and
dropped (a test's) take their thread with them; one failure is logged and never takes
the thread down, since the next turn tries again.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable

log = logging.getLogger(__name__)


def run_every[T](
    owner: T,
    every_seconds: float,
    work: Callable[[T], object],
    *,
    name: str,
    at_exit: bool = False,
) -> None:
    """Call ``work(owner)`` every ``every_seconds`` in a daemon thread named ``name`` while
    ``owner`` lives; with ``at_exit``, once more when the process exits."""
    stop = threading.Event()
    held = weakref.ref(owner)

    def turn() -> None:
        alive = held()
        if alive is None:
            return
        try:
            work(alive)
        except Exception:  # the next turn tries again
            log.exception("%s failed; it runs again in %.0f s", name, every_seconds)

    def run() -> None:
        while not stop.wait(every_seconds) and held() is not None:
            turn()

    def last() -> None:
        stop.set()
        turn()

    threading.Thread(target=run, name=name, daemon=True).start()
    atexit.register(last if at_exit else stop.set)
