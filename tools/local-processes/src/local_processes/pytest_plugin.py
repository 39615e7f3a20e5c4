"""Pytest plugin (registered as ``pytest11`` entry point): the ``azurite`` session fixture.

Installed with this package, so the app's tests and every tool's tests get the same
fixture without copying it. With pytest-xdist each worker runs its own Azurite.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from local_processes.azurite import Azurite, run_azurite


@pytest.fixture(scope="session")
def azurite(pytestconfig: pytest.Config) -> Iterator[Azurite]:
    """A running Azurite blob service (in memory, free port) for the whole test session."""
    with run_azurite(root=pytestconfig.rootpath) as running:
        yield running
