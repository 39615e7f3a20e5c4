"""Pytest plugin (registered as ``pytest11`` entry point): ``eventgrid_emulator_factory``.

Installed with this package, so the emulator's own tests and the app's tests start
emulators the same way without copying a fixture. With pytest-xdist each worker runs its
own emulators, on ports they pick themselves.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest

from eventgrid_emulator.process import EventGridEmulator, EventGridEmulatorProcess

_Key = tuple[Path, str | None, float]  # config file, storage, time scale


class EventGridEmulatorFactory(Protocol):
    def __call__(
        self, config_path: Path | str, *, storage: str | None = None, time_scale: float = 1.0
    ) -> EventGridEmulator: ...


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "eventgrid_emulator: Event Grid namespace emulator tests through the unmodified SDK",
    )


@pytest.fixture(scope="session")
def eventgrid_emulator_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[EventGridEmulatorFactory]:
    """Start (once per config, storage and time scale) an emulator; all stop at session end.

    ``storage`` is a blob connection string for dead letters (for example
    ``azurite.connection_string``); without it dead letters are dropped.
    """
    running: dict[_Key, tuple[EventGridEmulatorProcess, EventGridEmulator]] = {}

    def start(
        config_path: Path | str, *, storage: str | None = None, time_scale: float = 1.0
    ) -> EventGridEmulator:
        key = (Path(config_path).resolve(), storage, time_scale)
        if key not in running:
            log_path = tmp_path_factory.mktemp("eventgrid-emulator") / "emulator.log"
            process = EventGridEmulatorProcess(
                key[0], log_path, storage=storage, time_scale=time_scale
            )
            try:
                running[key] = (process, process.wait_ready())
            except BaseException:
                process.stop()
                raise
        return running[key][1]

    yield start
    for process, _ in running.values():
        if process.stop() not in (0, -15):
            sys.stderr.write(process.child.output())
