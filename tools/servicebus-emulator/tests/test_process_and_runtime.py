"""The emulator as a process: runtime counts endpoint, clean shutdown, bad config."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage

from emulator_sdk import make_client
from servicebus_emulator.process import EmulatorProcess, ServiceBusEmulator

pytestmark = pytest.mark.emulator
CONFIG_PATH = Path(__file__).with_name("config.json")


def get_json(url: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 (loopback http)
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


async def test_runtime_counts_endpoint(test_emulator: ServiceBusEmulator) -> None:
    queue = "counts-async"
    client = make_client("async", test_emulator.connection_string)
    async with client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages([ServiceBusMessage(f"c{i}") for i in range(3)])
            await sender.schedule_messages(
                ServiceBusMessage("later"), __import__("datetime").datetime(2099, 1, 1)
            )
        async with client.get_queue_receiver(queue) as receiver:
            first, second = await receiver.receive_messages(max_message_count=2, max_wait_time=5)
            await receiver.defer_message(first)
            await receiver.dead_letter_message(second, reason="Test", error_description="counted")
    status, counts = get_json(f"{test_emulator.admin_url}/runtime/{queue}")
    assert status == 200
    assert counts["active_message_count"] == 1
    assert counts["deferred_message_count"] == 1
    assert counts["scheduled_message_count"] == 1
    assert counts["dead_letter_message_count"] == 1
    assert counts["transfer_dead_letter_message_count"] == 0
    assert counts["total_message_count"] == 4
    assert str(counts["oldest_active_message_enqueued_time_utc"]).endswith("Z")
    status, everything = get_json(f"{test_emulator.admin_url}/runtime")
    assert status == 200
    assert queue in everything
    assert "fanout-sync/Subscriptions/high" in everything
    assert get_json(f"{test_emulator.admin_url}/runtime/no-such-queue")[0] == 404
    assert get_json(f"{test_emulator.admin_url}/health") == (200, {"status": "ok"})


def test_sigterm_stops_cleanly_and_bad_config_fails_fast(tmp_path: Path) -> None:
    emulator = EmulatorProcess(CONFIG_PATH, tmp_path / "emulator.log", sas_key=None)
    try:
        emulator.wait_ready()
    finally:
        started = time.monotonic()
        returncode = emulator.child.stop(signal.SIGTERM, timeout=10)
    assert returncode == 0
    assert time.monotonic() - started < 5
    output = emulator.child.output()
    assert "ready amqp=127.0.0.1:" in output
    assert "stopped" in output
    broken = tmp_path / "broken.json"
    broken.write_text('{"UserConfig": {}}')
    result = subprocess.run(
        [sys.executable, "-m", "servicebus_emulator", "--config", str(broken), "--port", "0"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "invalid config" in result.stdout
