"""The launcher keeps the Service Bus emulator up: one that dies is started again.

An emulator that stops while the stack runs (a crash, a kill, a developer restarting it)
used to end the whole stack, host and Azurite with it, stranding what had been accepted.
Here it is started again on the same AMQP and admin ports, with the same data folder
(so a persistent emulator brings its messages back), after a short backoff, while the
host keeps running (its listeners reconnect). Only repeated fast failures (by default 5
within a minute: an emulator that cannot live) stop the stack, as before.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from local_processes import Child, StartError
from servicebus_emulator.process import EmulatorProcess

STARTUP_TIMEOUT_S = 30.0


@dataclass
class RestartPolicy:
    """How often a dead emulator is started again, and when the launcher gives up.

    ``record_failure`` returns the attempt number (the failures within ``window_s``,
    this one included) or None once ``max_failures`` fell within the window; the delay
    before attempt k doubles from ``base_delay_s`` up to ``max_delay_s``.
    """

    max_failures: int = 5
    window_s: float = 60.0
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    _failures: deque[float] = field(default_factory=deque, repr=False)

    def __post_init__(self) -> None:
        if self.max_failures < 1:
            raise ValueError(f"max_failures must be at least 1, not {self.max_failures}")
        if self.window_s <= 0 or self.base_delay_s < 0 or self.max_delay_s < self.base_delay_s:
            raise ValueError(
                "window_s must be positive and 0 <= base_delay_s <= max_delay_s "
                f"(got {self.window_s}, {self.base_delay_s}, {self.max_delay_s})"
            )

    def record_failure(self, now: float) -> int | None:
        self._failures.append(now)
        while self._failures and self._failures[0] <= now - self.window_s:
            self._failures.popleft()
        attempt = len(self._failures)
        return None if attempt >= self.max_failures else attempt

    def delay(self, attempt: int) -> float:
        return float(min(self.max_delay_s, self.base_delay_s * 2 ** max(0, attempt - 1)))


class EmulatorGaveUp(Exception):
    """The emulator failed too often in too short a time; the message says how often."""


class SupervisedEmulator:
    """The Service Bus emulator the launcher started, restarted when it dies.

    ``data_dir`` None: the emulator keeps nothing on disk (what was in it is gone after a
    restart). The first start may pick a free admin port (``admin_port`` 0); restarts
    reuse the ports of the first, so the host and ``ServiceBusRuntimeCountsUrl`` still
    reach it.
    """

    def __init__(
        self,
        config_path: Path,
        log_path: Path,
        *,
        port: int,
        admin_port: int,
        sas_key: str | None,
        data_dir: Path | None,
        policy: RestartPolicy | None = None,
        say: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config_path = config_path
        self.log_path = log_path
        self.port = port
        self.admin_port = admin_port
        self.sas_key = sas_key
        self.data_dir = data_dir
        self.policy = policy or RestartPolicy()
        self.restarts = 0
        self.admin_url = ""
        self._say = say
        self._clock = clock
        self._process: EmulatorProcess | None = None

    @property
    def child(self) -> Child:
        if self._process is None:
            raise RuntimeError("the Service Bus emulator has not been started")
        return self._process.child

    def start(self) -> str:
        """Start the emulator and wait for its ready line; returns its admin URL."""
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
        self._process = EmulatorProcess(
            self.config_path,
            self.log_path,
            port=self.port,
            admin_port=self.admin_port,
            sas_key=self.sas_key,
            data_dir=self.data_dir,
        )
        self.admin_url = self._process.wait_ready(timeout=STARTUP_TIMEOUT_S).admin_url
        self.admin_port = urlsplit(self.admin_url).port or self.admin_port
        return self.admin_url

    def revive(self, stop: threading.Event, started: list[Child]) -> bool:
        """Start the dead emulator again (replacing its entry in ``started``); False when
        ``stop`` was set meanwhile. EmulatorGaveUp after too many fast failures."""
        while True:
            dead = self.child
            exit_code = dead.process.poll()
            attempt = self.policy.record_failure(self._clock())
            if attempt is None:
                raise EmulatorGaveUp(
                    f"the Service Bus emulator stopped unexpectedly (exit code {exit_code}) "
                    f"{self.policy.max_failures} times within {self.policy.window_s:.0f}s; "
                    f"giving up (log {self.log_path})"
                )
            self._say(
                f"Service Bus emulator stopped unexpectedly (exit code {exit_code}); "
                f"restarting it (attempt {attempt})"
            )
            dead.stop()  # closes its log file
            if stop.wait(self.policy.delay(attempt)):
                return False
            try:
                self.start()
            except StartError as error:
                self._say(f"The Service Bus emulator did not start again: {error}")
                self.child.stop()
                continue
            finally:
                if dead in started:
                    started[started.index(dead)] = self.child
            self.restarts += 1
            self._say(
                f"Restarted the Service Bus emulator on port {self.port} "
                f"(pid {self.child.process.pid})"
            )
            return True
