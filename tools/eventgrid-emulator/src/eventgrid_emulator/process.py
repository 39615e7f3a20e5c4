"""The emulator as a child process: start it, read its ready line, stop it.

What launchers, the test fixtures and benchmarks use to run ``python -m eventgrid_emulator``;
the process handling itself is ``local_processes.Child`` (own session, this run's log,
ready line, stop with a signal), as for the Service Bus emulator.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import tempfile
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from local_processes import Child

from .config import load_config

STARTUP_TIMEOUT_S = 30.0
READY = re.compile(r"ready http=(?P<endpoint>http://[\d.]+:\d+) namespace=(?P<namespace>\S+)")


@dataclass(frozen=True)
class EventGridEmulator:
    """Where a running emulator listens and the key that opens it."""

    endpoint: str  # what EventGridPublisherClient / EventGridConsumerClient take
    access_key: str
    namespace: str
    config_path: Path
    log_path: Path | None = field(default=None, compare=False)

    def runtime(self, topic: str | None = None, subscription: str | None = None) -> Any:
        """Counts of every subscription, or of ``topic/subscription`` (GET /runtime)."""
        path = "/runtime"
        if topic is not None and subscription is not None:
            path += f"/{urllib.parse.quote(topic)}/{urllib.parse.quote(subscription)}"
        with urllib.request.urlopen(self.endpoint + path, timeout=10) as response:  # noqa: S310 (loopback)
            return json.loads(response.read())


class EventGridEmulatorProcess:
    """``python -m eventgrid_emulator`` as a child; ``wait_ready`` reads its ready line.

    Port 0 (the default) lets the emulator pick a free port itself, so parallel runs never
    collide. ``storage`` is the blob connection string for dead letters (None: dropped).
    """

    def __init__(
        self,
        config_path: Path,
        log_path: Path | None,
        *,
        port: int = 0,
        storage: str | None = None,
        time_scale: float = 1.0,
        push_timeout: float | None = None,
    ) -> None:
        self.config_path = config_path
        self.log_path = log_path
        command = [sys.executable, "-m", "eventgrid_emulator", "--config", str(config_path),
                   "--host", "127.0.0.1", "--port", str(port),
                   "--time-scale", repr(time_scale)]  # fmt: skip
        if storage:
            command += ["--storage", storage]
        if push_timeout is not None:
            command += ["--push-timeout", repr(push_timeout)]
        self.child = Child("Event Grid emulator", command, log_path)

    def wait_ready(self, timeout: float = STARTUP_TIMEOUT_S) -> EventGridEmulator:
        match = self.child.wait_for(READY, timeout)
        config = load_config(self.config_path)
        return EventGridEmulator(
            endpoint=match["endpoint"],
            access_key=config.access_key,
            namespace=match["namespace"],
            config_path=self.config_path,
            log_path=self.log_path,
        )

    def stop(self, timeout: float = 10.0) -> int | None:
        return self.child.stop(signal.SIGTERM, timeout)


@contextmanager
def run_emulator(
    config_path: Path,
    *,
    storage: str | None = None,
    time_scale: float = 1.0,
    log_dir: Path | None = None,
) -> Iterator[EventGridEmulator]:
    """An emulator with ``config_path`` on a free port until the block ends."""
    workdir = log_dir or Path(tempfile.mkdtemp(prefix="eventgrid-emulator-"))
    emulator = EventGridEmulatorProcess(
        config_path.resolve(), workdir / "emulator.log", storage=storage, time_scale=time_scale
    )
    try:
        yield emulator.wait_ready()
    finally:
        emulator.stop()
        if log_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)
