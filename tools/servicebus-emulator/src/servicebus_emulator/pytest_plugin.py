"""Pytest plugin (registered as ``pytest11`` entry point): ``servicebus_emulator_factory``.

Installed with this package, so the emulator's own tests, the local host's tests and the
app's tests start emulators the same way without copying a fixture. With pytest-xdist each
worker runs its own emulators (on ports they pick themselves, so workers never collide).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servicebus_emulator.process import EmulatorProcess, ServiceBusEmulator


@pytest.fixture(scope="session")
def servicebus_emulator_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[Path | str], ServiceBusEmulator]]:
    """Start (once per config file) an emulator; all are stopped at the end of the session."""
    running: dict[Path, tuple[EmulatorProcess, ServiceBusEmulator]] = {}

    def start(config_path: Path | str) -> ServiceBusEmulator:
        resolved = Path(config_path).resolve()
        if resolved not in running:
            log_path = tmp_path_factory.mktemp("servicebus-emulator") / "emulator.log"
            emulator = EmulatorProcess(resolved, log_path)
            try:
                running[resolved] = (emulator, emulator.wait_ready())
            except BaseException:
                emulator.stop()
                raise
        return running[resolved][1]

    yield start
    for emulator, _ in running.values():
        if emulator.stop() not in (0, -15):
            sys.stderr.write(emulator.child.output())
