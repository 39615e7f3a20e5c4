"""The chaos run's size (options or environment variables) and its stack.

Sizes: ``--chaos-requests`` (``CHAOS_REQUESTS``), ``--chaos-host-kills``
(``CHAOS_HOST_KILLS``), ``--chaos-storage-outage`` seconds (``CHAOS_STORAGE_OUTAGE_S``)
and ``--chaos-wait`` seconds for every request to end (``CHAOS_WAIT_S``). The options
work when ``tests/chaos`` is named on the command line (pytest reads a folder's options
only then); the variables work everywhere, ``make test`` included.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.chaos.local_stack import ChaosStack
from tests.chaos.traffic import PRODUCER_TENANT
from tests.e2e.conftest import write_stack_settings

DEFAULTS = {"requests": 60, "host_kills": 1, "storage_outage": 30, "wait": 90}
ENVIRONMENT = {
    "requests": "CHAOS_REQUESTS",
    "host_kills": "CHAOS_HOST_KILLS",
    "storage_outage": "CHAOS_STORAGE_OUTAGE_S",
    "wait": "CHAOS_WAIT_S",
}
# Timers run often, so that what they repair (deferred messages, and whatever timers the
# app declares in its settings: every "...Schedule" value) is repaired within the run.
FAST_SCHEDULE = "*/5 * * * * *"


@dataclass(frozen=True)
class ChaosSize:
    requests: int
    host_kills: int
    storage_outage_s: float
    wait_s: float


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "chaos run (tests/chaos)")
    group.addoption("--chaos-requests", type=int, help="healthy HTTP requests (default 60)")
    group.addoption("--chaos-host-kills", type=int, help="SIGKILLs of the host (default 1)")
    group.addoption("--chaos-storage-outage", type=float, help="seconds Azurite is down (30)")
    group.addoption("--chaos-wait", type=float, help="seconds for every request to end (90)")


def _size_value(config: pytest.Config, name: str) -> float:
    option = config.getoption(f"--chaos-{name.replace('_', '-')}", default=None)
    if option is not None:
        return float(option)
    return float(os.environ.get(ENVIRONMENT[name], DEFAULTS[name]))


@pytest.fixture(scope="module")
def chaos_size(pytestconfig: pytest.Config) -> ChaosSize:
    return ChaosSize(
        requests=int(_size_value(pytestconfig, "requests")),
        host_kills=int(_size_value(pytestconfig, "host_kills")),
        storage_outage_s=_size_value(pytestconfig, "storage_outage"),
        wait_s=_size_value(pytestconfig, "wait"),
    )


def chaos_values(root: Path) -> dict[str, str]:
    """The settings the chaos stack changes: faults injected, retries quick, timers often,
    and result events published to the local Event Grid namespace (counted afterwards)."""
    sample = json.loads((root / "local.settings.sample.json").read_text())["Values"]
    timers = {
        name: FAST_SCHEDULE
        for name in sample
        if name.endswith("Schedule") and name != "BacklogReportSchedule"
    }
    return {
        **timers,
        "DeferredSweepSchedule": "*/2 * * * * *",
        "LocalModelTransientRate": "0.1",
        "LocalModelLatencyMs": "300",
        "LocalModelFaults": "true",
        # A healthy request asking for two transient faults has MaxRetries - 1 tries left,
        # each failing at LocalModelTransientRate: 5 left 0.1^4 (a request in 10,000 was
        # dead-lettered, seen once); 9, the default, leaves 0.1^8.
        "MaxRetries": "9",
        "RetryBaseSeconds": "0.5",
        "RetryMaxSeconds": "2",
        "ProducerTenants": PRODUCER_TENANT,
    }


@contextmanager
def running_chaos_stack(
    root: Path, *, servicebus_data: bool, extra_values: dict[str, str] | None = None
) -> Iterator[ChaosStack]:
    """The whole local stack on its own free ports, Azurite's data on disk, and the
    Service Bus emulator's too with ``servicebus_data`` (``workdir/servicebus``)."""
    workdir = Path(tempfile.mkdtemp(prefix="inferbus-chaos-"))
    values_changed = {**chaos_values(root), **(extra_values or {})}
    settings_path, values = write_stack_settings(root, workdir, values_changed)
    eventgrid = values["EventGridPull__namespaceEndpoint"]
    values.update(
        {
            "EventGridTopic__topicEndpoint": eventgrid,
            "EventGridTopic__topicKey": values["EventGridPull__key"],
            "EventGridTopic__namespaceTopic": "inference-results",
        }
    )
    document = json.loads(settings_path.read_text())
    document["Values"] = values
    settings_path.write_text(json.dumps(document))
    stack = ChaosStack(
        root,
        workdir,
        settings_path,
        values,
        int(document["Host"]["LocalHttpPort"]),
        servicebus_data=workdir / "servicebus" if servicebus_data else None,
    )
    try:
        stack.start()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def chaos_stack(pytestconfig: pytest.Config) -> Iterator[ChaosStack]:
    """The stack of the main campaign (the Service Bus emulator keeps nothing on disk:
    this campaign never restarts it)."""
    with running_chaos_stack(pytestconfig.rootpath, servicebus_data=False) as stack:
        yield stack


# What each chaos run did and how its requests ended, printed at the end of the session
# whether its properties held or not (the figures a larger run is made for).
RUN_SUMMARIES = pytest.StashKey[list[str]]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    summaries = terminalreporter.config.stash.get(RUN_SUMMARIES, [])
    for summary in summaries:
        terminalreporter.write_line(f"chaos run: {summary}")
