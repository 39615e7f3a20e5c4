"""The emulator as a process: the infra config, runtime counts endpoint, clean shutdown."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode

from tests.emulator.sdk import make_client
from tests.fixtures.servicebus_emulator import REPO_ROOT, ServiceBusEmulator

pytestmark = pytest.mark.emulator
RESULTS = "inference-results"


async def test_infra_config_entities_route_as_documented(
    servicebus_emulator: ServiceBusEmulator,
) -> None:
    client = make_client("async", servicebus_emulator.connection_string)
    async with client:
        async with client.get_queue_sender("inference-requests") as sender:
            await sender.send_messages(ServiceBusMessage("{}", message_id=str(uuid.uuid4())))
        async with client.get_queue_sender("inference-ordered") as sender:
            await sender.send_messages(ServiceBusMessage("{}", session_id="doc-1"))
        async with client.get_topic_sender(RESULTS) as sender:
            await sender.send_messages(
                [
                    ServiceBusMessage(
                        "r1", application_properties={"priority": "high", "model_name": "x"}
                    ),
                    ServiceBusMessage("r2", application_properties={"review_required": True}),
                    ServiceBusMessage(
                        "r3", application_properties={"model_name": "local-analyzer"}
                    ),
                ]
            )
        counts = {
            name: servicebus_emulator.runtime_properties(f"{RESULTS}/Subscriptions/{name}")[
                "active_message_count"
            ]
            for name in ("high-priority", "human-review", "audit", "model-local-analyzer")
        }
        assert counts == {
            "high-priority": 1,
            "human-review": 1,
            "audit": 3,
            "model-local-analyzer": 1,
        }
        assert (
            servicebus_emulator.runtime_properties("inference-requests")["active_message_count"]
            == 1
        )
        assert (
            servicebus_emulator.runtime_properties("inference-ordered")["active_message_count"] == 1
        )
        delete = ServiceBusReceiveMode.RECEIVE_AND_DELETE
        async with client.get_queue_receiver("inference-requests", receive_mode=delete) as receiver:
            assert len(await receiver.receive_messages(max_wait_time=5)) == 1
        async with client.get_queue_receiver(
            "inference-ordered", session_id="doc-1", receive_mode=delete
        ) as r:
            assert len(await r.receive_messages(max_wait_time=5)) == 1
        for name, count in counts.items():
            async with client.get_subscription_receiver(
                RESULTS, name, receive_mode=delete
            ) as receiver:
                got = await receiver.receive_messages(max_message_count=count, max_wait_time=5)
                while len(got) < count:
                    more = await receiver.receive_messages(
                        max_message_count=count - len(got), max_wait_time=5
                    )
                    assert more, f"{name} received {len(got)} of {count} copies"
                    got += more
                assert len(got) == count


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
    config = REPO_ROOT / "infra" / "local" / "servicebus-emulator.json"
    command = [sys.executable, "-m", "devtools.servicebus_emulator", "--config", str(config)]
    log_path = tmp_path / "emulator.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [*command, "--port", "0", "--admin-port", "0"], cwd=REPO_ROOT, stdout=log, stderr=log
        )
        deadline = time.monotonic() + 20
        while "ready amqp=" not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    assert time.monotonic() - started < 5
    output = log_path.read_text()
    assert "ready amqp=127.0.0.1:" in output
    assert "stopped" in output
    broken = tmp_path / "broken.json"
    broken.write_text('{"UserConfig": {}}')
    result = subprocess.run(
        [*command[:3], "--config", str(broken), "--port", "0"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert "invalid config" in result.stdout
