"""Pytest plugin (registered as ``pytest11`` entry point): ``openai_emulator_factory``.

Installed with this package, so the emulator's own tests and the app's tests start
emulators the same way without copying a fixture. With pytest-xdist each worker runs its
own emulators, on ports they pick themselves.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Protocol

import pytest

from openai_emulator.process import OpenAIEmulator, OpenAIEmulatorProcess

# auto-advance, max lines, max bytes, per-deployment enqueued-token limits
_Key = tuple[float, int | None, int | None, tuple[tuple[str, int], ...]]


class OpenAIEmulatorFactory(Protocol):
    def __call__(
        self,
        auto_advance: float = 0.0,
        *,
        max_lines: int | None = None,
        max_bytes: int | None = None,
        enqueued_token_limits: Mapping[str, int] | None = None,
    ) -> OpenAIEmulator: ...


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "openai_emulator: Azure OpenAI batch emulator tests through the real SDK"
    )


@pytest.fixture(scope="session")
def openai_emulator_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OpenAIEmulatorFactory]:
    """Start (once per distinct options) an emulator on a free port; all stop at session end.

    Emulators are shared by the session: tests create their own files and batches (ids
    are unique) and should not ``reset`` one another's, nor leave a quota set. A test
    that needs deployments' enqueued-token limits asks for them here
    (``enqueued_token_limits``): an emulator of those options is started for it.
    """
    running: dict[_Key, tuple[OpenAIEmulatorProcess, OpenAIEmulator]] = {}

    def start(
        auto_advance: float = 0.0,
        *,
        max_lines: int | None = None,
        max_bytes: int | None = None,
        enqueued_token_limits: Mapping[str, int] | None = None,
    ) -> OpenAIEmulator:
        limits = tuple(sorted((enqueued_token_limits or {}).items()))
        key = (auto_advance, max_lines, max_bytes, limits)
        if key not in running:
            log_path = tmp_path_factory.mktemp("openai-emulator") / "emulator.log"
            process = OpenAIEmulatorProcess(
                log_path,
                auto_advance=auto_advance,
                max_lines=max_lines,
                max_bytes=max_bytes,
                deployment_token_limits=dict(limits),
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
