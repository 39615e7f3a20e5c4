"""The fuzz run's stack and size.

``--fuzz-examples N`` (or ``FUZZ_EXAMPLES``) sets the examples per route (default 100);
the option works when ``tests/fuzz`` is named on the command line, the variable
everywhere. Hypothesis is derandomized (the same examples every run) and keeps no
database, so a CI run is reproducible; its minimal failing example is printed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.appinsights import IngestionRecorder
from tests.e2e.conftest import Stack, launched_stack
from tests.fuzz.event_strategies import DELIVERY_SECRET
from tests.fuzz.properties import Accepted

DEFAULT_EXAMPLES = 100
# Hypothesis keeps caches (Unicode tables, constants) even without an example database:
# under .local, the local state the app package and git leave out, not in a new top-level
# folder of the repository.
os.environ.setdefault(
    "HYPOTHESIS_STORAGE_DIRECTORY",
    str(Path(__file__).resolve().parents[2] / ".local" / "hypothesis"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("fuzz", "HTTP fuzz run (tests/fuzz)").addoption(
        "--fuzz-examples", type=int, help=f"examples per route (default {DEFAULT_EXAMPLES})"
    )


def pytest_configure(config: pytest.Config) -> None:
    examples = config.getoption("--fuzz-examples", default=None)
    if examples is not None:
        os.environ["FUZZ_EXAMPLES"] = str(examples)


def examples_per_route() -> int:
    return int(os.environ.get("FUZZ_EXAMPLES", DEFAULT_EXAMPLES))


@pytest.fixture(scope="module")
def fuzz_stack(pytestconfig: pytest.Config) -> Iterator[Stack]:
    """``python -m devtools.stack`` on its own free ports, with a webhook secret set (the
    fuzzer sends it, a wrong one, or none)."""
    workdir = Path(tempfile.mkdtemp(prefix="inferbus-fuzz-"))
    recorder = IngestionRecorder().start()  # telemetry stays off; the Stack names a recorder
    try:
        values = {"WebhookSharedSecret": DELIVERY_SECRET, "LocalModelFaults": "true"}
        with launched_stack(pytestconfig.rootpath, workdir, recorder, values) as running:
            yield running
    finally:
        recorder.stop()


@pytest.fixture(scope="module")
def accepted() -> Accepted:
    return Accepted()
