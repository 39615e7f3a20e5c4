"""A child process in its own session, with its output in a log file (or on stdout).

A launcher must stop exactly what it started: each child runs in a session of its own,
so a Ctrl-C in the terminal reaches only the launcher, which then stops its children in
the order it chooses.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO


class StartError(Exception):
    """A child process exited or stayed silent before it was ready; the message says why."""


class Child:
    """One child process; its output goes to ``log_path`` (appended) or, when None, to stdout."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        log_path: Path | None,
        *,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.log_path = log_path
        self.lines: list[str] = []
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] | None = log_path.open("ab") if log_path else None
        # The log is appended across runs: only what this process writes counts as its
        # output, so a "ready" line from an earlier run is never taken for this one's.
        self._log_start = self._log.tell() if self._log else 0
        self.process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=self._log if self._log else subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if self._log is None:
            threading.Thread(target=self._forward, name=f"{name}-output", daemon=True).start()

    def _forward(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace")
            self.lines.append(line)
            sys.stdout.write(line)
            sys.stdout.flush()

    def output(self) -> str:
        """What this process has written so far (not earlier runs' lines in the same log)."""
        if self.log_path is not None:
            with self.log_path.open("rb") as log_file:
                log_file.seek(self._log_start)
                return log_file.read().decode(errors="replace")
        return "".join(self.lines)

    def running(self) -> bool:
        return self.process.poll() is None

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        """The first match of ``pattern`` in this run's output; StartError if it never comes."""
        deadline = time.monotonic() + timeout
        while True:
            match = pattern.search(self.output())
            if match:
                return match
            if self.process.poll() is not None:
                raise StartError(f"{self.name} exited early:\n{self.output()[-3000:]}")
            if time.monotonic() >= deadline:
                raise StartError(f"{self.name} did not become ready within {timeout:.0f}s")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        """Send ``sig``, wait up to ``timeout`` seconds, then kill; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self._log:
            self._log.close()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode
