"""Root fixtures: the local stack (Azurite, the Service Bus emulator) as pytest plugins, and
the app over in-memory ports for unit tests; and the order in which `make test` hands out
its files."""

import pytest

from tests.support.wiring import Wired, wire

pytest_plugins = ["tests.fixtures.azurite", "tests.fixtures.servicebus_emulator"]

# The files that run for most of a minute or more on one worker (measured with
# --durations), longest first. `make test` keeps a file on one worker (--dist loadfile),
# so one of these handed out last is the run's tail while the other workers sit idle:
# they go first, and the many short files fill the workers around them. xdist's own
# reordering (most tests first) is off (pyproject.toml) so that this order holds.
LONG_FILES = (
    "tests/chaos/test_emulator_restart.py",
    "tests/chaos/test_chaos.py",
    "tools/servicebus-emulator/tests/test_sdk_samples.py",
    "tests/e2e/test_global_batch.py",
    "tests/integration/test_servicebus_deadletters.py",
    "tests/infra/test_checkov.py",
    "tests/integration/test_openapi_schemathesis.py",
    "tests/integration/test_producer.py",
    "tools/servicebus-emulator/tests/test_persistence.py",
    "tests/fuzz/test_http_fuzz.py",
    "tests/e2e/test_launcher.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long files first, in LONG_FILES's order; every other test keeps its place (the
    sort is stable, so each file's own order holds too)."""
    missing = [path for path in LONG_FILES if not (config.rootpath / path).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py LONG_FILES names no file: {missing}")
    rank = {path: index for index, path in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(LONG_FILES)))


@pytest.fixture
def wired() -> Wired:
    """The app's use cases over the in-memory ports (see tests/support/wiring.py)."""
    return wire()
