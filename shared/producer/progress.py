"""Progress of a producer run on a terminal (one line rewritten in place) or a log (a
line every few seconds), and the final figures either way."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from shared.producer.report import SendReport

TERMINAL_INTERVAL_S = 0.1
LOG_INTERVAL_S = 5.0


class ProgressDisplay:
    """A ``Producer`` progress callback writing to ``stream`` (stderr, so that stdout
    carries the summary alone)."""

    def __init__(
        self,
        stream: TextIO,
        *,
        interactive: bool | None = None,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._interactive = stream.isatty() if interactive is None else interactive
        default = TERMINAL_INTERVAL_S if self._interactive else LOG_INTERVAL_S
        self._interval = default if interval is None else interval
        self._clock = clock
        self._last = clock()

    def __call__(self, report: SendReport) -> None:
        now = self._clock()
        done = report.finished is not None
        if not done and now - self._last < self._interval:
            return
        self._last = now
        text = f"producer: {report.progress_text()}"
        if self._interactive:
            # Carriage return, the line, erase to the end of the line; a newline at the end.
            self._stream.write(f"\r{text}\x1b[K" + ("\n" if done else ""))
        else:
            self._stream.write(text + "\n")
        self._stream.flush()
