"""Ctrl-C in a terminal: the whole foreground process group gets SIGINT, the host alone acts.

A terminal delivers Ctrl-C to every process of its foreground group. The worker runs in a
process group of its own, so the SIGINT reaches the host only, which drains the running
invocation (its message settled as usual) and then stops the worker. And whatever way the
host ends, even SIGKILL, its worker does not outlive it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage

from functions_host.process import HostProcess
from hostproc import wait_for
from servicebus_emulator.process import ServiceBusEmulator

pytestmark = pytest.mark.integration

DRAIN_APP = Path(__file__).with_name("drain_app")
DRAIN_QUEUE = "host-drain"
ORPHAN_QUEUE = "host-orphan"  # its message stays locked by the killed host: a queue of its own
WORKER_PID = re.compile(r"Worker process started and initialized \(pid (\d+)\)")


class DrainHost(HostProcess):
    """The drain app on a host started (by ``local_processes.Child``) as a group leader."""

    def __init__(self, workdir: Path, emulator: ServiceBusEmulator, queue: str) -> None:
        self.record_path = workdir / "record.jsonl"
        values = {
            "FUNCTIONS_WORKER_RUNTIME": "python",
            "ServiceBusConnection": emulator.connection_string,
            "DrainQueue": queue,
            "DRAIN_RECORD_FILE": str(self.record_path),
            "DRAIN_WORK_SECONDS": "8",
        }
        settings = workdir / "local.settings.json"
        settings.write_text(json.dumps({"IsEncrypted": False, "Values": values}))
        super().__init__(
            DRAIN_APP,
            settings,
            workdir / "host.log",
            keys_path=workdir / "host-keys.json",
            env={k: v for k, v in os.environ.items() if k not in values},
        )

    def records(self, event: str) -> list[dict[str, Any]]:
        if not self.record_path.exists():
            return []
        rows = [json.loads(line) for line in self.record_path.read_text().splitlines() if line]
        return [row for row in rows if row["event"] == event]

    def worker_pid(self) -> int:
        """The worker's pid, from the host's "Worker process started" line."""
        started = WORKER_PID.search(self.log())
        assert started is not None, "the host logs its worker's pid when it starts"
        return int(started[1])


def _process_gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its new parent counts as exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _send(emulator: ServiceBusEmulator, queue: str) -> str:
    message_id = f"drain-{uuid.uuid4().hex[:8]}"
    client = ServiceBusClient.from_connection_string(emulator.connection_string)
    with client, client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage(b"work", message_id=message_id))
    return message_id


@pytest.fixture
def start_host(
    host_emulator: ServiceBusEmulator, tmp_path: Path
) -> Iterator[Callable[[str], DrainHost]]:
    """Starts the drain app on a given queue; every host started is stopped afterwards."""
    hosts: list[DrainHost] = []

    def start(queue: str) -> DrainHost:
        workdir = tmp_path / queue
        workdir.mkdir()
        host = DrainHost(workdir, host_emulator, queue)
        hosts.append(host)
        host.wait_started()
        return host

    yield start
    for host in hosts:
        host.stop()


def test_ctrl_c_to_the_whole_group_drains_the_running_invocation(
    start_host: Callable[[str], DrainHost], host_emulator: ServiceBusEmulator
) -> None:
    drain_host = start_host(DRAIN_QUEUE)
    message_id = _send(host_emulator, DRAIN_QUEUE)
    wait_for(lambda: drain_host.records("started"), what="the invocation running")
    worker = drain_host.worker_pid()
    assert os.getpgid(drain_host.child.process.pid) == drain_host.child.process.pid

    os.killpg(drain_host.child.process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    returncode = drain_host.child.process.wait(timeout=60)

    log = drain_host.log()
    assert returncode == 0, log
    assert [r["message_id"] for r in drain_host.records("started")] == [message_id]
    finished = drain_host.records("finished")
    assert [(r["message_id"], r["delivery_count"]) for r in finished] == [(message_id, 1)], log
    assert "Executed 'Functions.long_running' (Succeeded" in log
    assert "exited unexpectedly" not in log
    assert log.index("Stopping host") < log.index("Executed 'Functions.long_running'")
    counts = host_emulator.runtime_properties(DRAIN_QUEUE)
    assert (counts["active_message_count"], counts["dead_letter_message_count"]) == (0, 0)
    assert counts["total_message_count"] == 0, "the message was completed, not abandoned"
    assert _process_gone(worker)


def test_the_worker_does_not_outlive_a_killed_host(
    start_host: Callable[[str], DrainHost], host_emulator: ServiceBusEmulator
) -> None:
    """SIGKILL of the host's whole group misses the worker (a group of its own): the worker
    sees its host gone and exits at once, without finishing the function nobody would settle."""
    host = start_host(ORPHAN_QUEUE)
    worker = host.worker_pid()
    assert os.getpgid(worker) != os.getpgid(host.child.process.pid)
    _send(host_emulator, ORPHAN_QUEUE)
    wait_for(lambda: host.records("started"), what="the invocation running")

    os.killpg(host.child.process.pid, signal.SIGKILL)  # no drain, no finally in the host
    host.child.process.wait(timeout=10)

    wait_for(lambda: _process_gone(worker), timeout=30, what="the orphaned worker exiting")
    assert host.records("finished") == [], "the orphaned worker ran its function to the end"
