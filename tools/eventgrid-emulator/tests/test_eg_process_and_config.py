"""The emulator as a process (ready line, clean stop, bad config) and its config schema."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from eventgrid_emulator.config import ConfigError, load_config, parse_duration
from eventgrid_emulator.process import EventGridEmulatorProcess

REPO_CONFIG = Path(__file__).resolve().parents[3] / "infra" / "local" / "eventgrid-namespace.json"
TEST_CONFIG = Path(__file__).with_name("namespace.json")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback http)
        return json.loads(response.read())


def test_ready_line_health_runtime_and_sigterm(tmp_path: Path) -> None:
    process = EventGridEmulatorProcess(REPO_CONFIG, tmp_path / "emulator.log")
    try:
        emulator = process.wait_ready()
        assert emulator.namespace == "inferbus-local"
        assert emulator.access_key == "local-eventgrid-namespace-key"
        assert get_json(f"{emulator.endpoint}/health") == {"status": "ok"}
        runtime = emulator.runtime()
        assert set(runtime) == {"inference-requests/app-pull", "inference-results/results-pull"}
        assert emulator.runtime("inference-requests", "app-pull")["deliveryMode"] == "Queue"
    finally:
        started = time.monotonic()
        returncode = process.child.stop(signal.SIGTERM, timeout=10)
    assert returncode == 0
    assert time.monotonic() - started < 5
    output = process.child.output()
    assert "ready http=http://127.0.0.1:" in output
    assert "stopped" in output


def test_bad_config_exits_2_and_says_why(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"namespace": {"name": "x"}}')
    result = subprocess.run(
        [sys.executable, "-m", "eventgrid_emulator", "--config", str(broken), "--port", "0"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "invalid config" in result.stdout
    assert "accessKey" in result.stdout


def test_repository_config_reads_as_bicep_says() -> None:
    config = load_config(REPO_CONFIG)
    topics = {t.name: t for t in config.topics}
    (pull,) = topics["inference-requests"].subscriptions
    assert (pull.name, pull.mode, pull.lock_duration, pull.max_delivery_count) == (
        "app-pull",
        "Queue",
        60.0,
        10,
    )
    assert pull.time_to_live == 86400.0  # P1D, within the topic's 1 day retention
    assert pull.dead_letter_container == "eventgrid-deadletters"
    assert pull.filter.matches({"type": "com.inferbus.InferenceRequested"})
    assert not pull.filter.matches({"type": "com.inferbus.InferenceCompleted"})
    (results,) = topics["inference-results"].subscriptions
    assert results.time_to_live == 86400.0  # P7D capped by eventRetentionInDays 1


def _with_subscription(change: dict[str, Any]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(TEST_CONFIG.read_text())
    subscription = document["topics"][0]["eventSubscriptions"][0]
    for key, value in change.items():
        target = subscription
        *path, last = key.split(".")
        for part in path:
            target = target[part]
        target[last] = value
    return document


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"properties.filtersConfiguration.filters": [{"operatorType": "StringLike"}]},
            "unknown operatorType",
        ),
        (
            {
                "properties.filtersConfiguration.filters": [
                    {"operatorType": "StringIn", "key": "subject", "values": []}
                ]
            },
            "non-empty list",
        ),
        (
            {
                "properties.filtersConfiguration.filters": [
                    {"operatorType": "NumberIn", "key": "data.n", "values": ["1"]}
                ]
            },
            "not values of its type",
        ),
        ({"properties.deliveryConfiguration.deliveryMode": "Push"}, "local.endpointUrl"),
        ({"properties.deliveryConfiguration.queue.eventTimeToLive": "1 day"}, "ISO 8601"),
        ({"properties.deliveryConfiguration.queue.maxDeliveryCount": 0}, "positive integer"),
        ({"properties.eventDeliverySchema": "EventGridSchema"}, "CloudEventSchemaV1_0"),
    ],
)
def test_config_errors_name_the_problem(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    path = tmp_path / "namespace.json"
    path.write_text(json.dumps(_with_subscription(change)))
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_iso_durations() -> None:
    assert parse_duration("PT1M") == 60
    assert parse_duration("P1DT2H30M") == 86400 + 2 * 3600 + 30 * 60
    assert parse_duration("PT0.5S") == 0.5
    for bad in ("P", "PT", "P1DT", "1D", "P1Y"):
        with pytest.raises(ConfigError):
            parse_duration(bad)
