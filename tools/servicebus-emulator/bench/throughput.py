"""Throughput of the local Service Bus emulator through the unmodified SDK.

Prints messages/s for batched sends, receive+complete (peek-lock, prefetch) and topic
fan-out, the SDK-only ceiling (encoding/decoding without any broker), and CPU time per
message of the emulator process versus this client process. Figures only: nothing here
asserts a speed.
Run: ``.venv/bin/python tools/servicebus-emulator/bench/throughput.py [--messages N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from azure.servicebus import (
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusMessageBatch,
    ServiceBusReceiveMode,
)
from azure.servicebus._pyamqp._decode import decode_payload
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._transport._pyamqp_transport import PyamqpTransport

from servicebus_emulator.process import EmulatorProcess

BODY = b"x" * 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def bench_config() -> dict[str, object]:
    queue = {"Name": "bench-queue", "Properties": {"LockDuration": "PT1M", "MaxDeliveryCount": 10}}
    subscriptions = [
        {
            "Name": "everything",
            "Rules": [
                {
                    "Name": "$Default",
                    "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}},
                }
            ],
        },
        {
            "Name": "by-model",
            "Rules": [
                {
                    "Name": "m",
                    "Properties": {
                        "FilterType": "Correlation",
                        "CorrelationFilter": {"Properties": {"model_name": "local-analyzer"}},
                    },
                }
            ],
        },
        {
            "Name": "by-sql",
            "Rules": [
                {
                    "Name": "s",
                    "Properties": {
                        "FilterType": "Sql",
                        "SqlFilter": {"SqlExpression": "priority = 'high' OR n > 5"},
                    },
                }
            ],
        },
    ]
    topic = {"Name": "bench-topic", "Properties": {}, "Subscriptions": subscriptions}
    return {
        "UserConfig": {
            "Namespaces": [{"Name": "sbemulatorns", "Queues": [queue], "Topics": [topic]}]
        }
    }


@contextmanager
def emulator() -> Iterator[tuple[str, int]]:
    """The emulator with the benchmark's entities: (connection string, its process id)."""
    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "config.json"
        config.write_text(json.dumps(bench_config()))
        process = EmulatorProcess(config, Path(folder) / "emulator.log")
        try:
            yield process.wait_ready().connection_string, process.child.process.pid
        finally:
            process.stop()


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class Meter:
    """Wall time and CPU seconds of the emulator and of this process for one phase."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def measure(self, name: str, count: int, work: Callable[[], None]) -> None:
        broker0, client0, wall0 = process_cpu(self.pid), time.process_time(), time.perf_counter()
        work()
        wall = time.perf_counter() - wall0
        broker = process_cpu(self.pid) - broker0
        client = time.process_time() - client0
        print(
            f"{name:<34} {count / wall:>9,.0f} msg/s   emulator {broker / count * 1e6:>6.0f} us/msg"
            f"   client {client / count * 1e6:>6.0f} us/msg   ({count} msgs, {wall:.2f} s)"
        )


def sdk_ceiling(count: int) -> None:
    """What the client alone costs: batch encoding for send, payload decoding for receive."""
    start = time.perf_counter()
    batches = 0
    remaining = count
    while remaining:
        batch = ServiceBusMessageBatch(max_size_in_bytes=256 * 1024, amqp_transport=PyamqpTransport)
        while remaining:
            try:
                batch.add_message(ServiceBusMessage(BODY, application_properties={"n": remaining}))
            except ValueError:
                break
            remaining -= 1
        out = bytearray()
        encode_payload(out, batch._message)  # what the sender puts on the wire
        batches += 1
    encode = time.perf_counter() - start
    single = ServiceBusMessage(BODY, application_properties={"n": 1})
    wire = bytearray()
    encode_payload(wire, PyamqpTransport.to_outgoing_amqp_message(single._raw_amqp_message))
    payload = memoryview(bytes(wire))
    start = time.perf_counter()
    for _ in range(count):
        decode_payload(payload)
    decode = time.perf_counter() - start
    label = "SDK only: build+encode batches"
    print(f"{label:<34} {count / encode:>9,.0f} msg/s   ({batches} batches)")
    print(f"{'SDK only: decode received payload':<34} {count / decode:>9,.0f} msg/s")


def with_n(props: dict[str, Any], n: int) -> dict[str | bytes, Any]:
    """Application properties: ``props`` and the message's number ``n`` (for SQL filters)."""
    properties: dict[str | bytes, Any] = {key: value for key, value in props.items()}
    properties["n"] = n
    return properties


def fill_batch(sender: Any, remaining: int, props: dict[str, Any]) -> tuple[Any, int]:
    batch = sender.create_message_batch()
    while remaining:
        try:
            batch.add_message(
                ServiceBusMessage(BODY, application_properties=with_n(props, remaining))
            )
        except ValueError:
            break
        remaining -= 1
    return batch, remaining


def sender_phase(sender: Any, count: int, **props: Any) -> Callable[[], None]:
    """Opens the sender first (one message) so the timed part is steady-state sending."""
    sender.send_messages(ServiceBusMessage(BODY, application_properties=with_n(props, 0)))

    def run() -> None:
        remaining = count
        while remaining:
            batch, remaining = fill_batch(sender, remaining, props)
            sender.send_messages(batch)

    return run


def receiver_phase(receiver: Any, count: int, complete: bool) -> Callable[[], None]:
    """Opens the link and takes the warm-up message before the timed part starts."""
    for message in receiver.receive_messages(max_message_count=1, max_wait_time=10):
        if complete:
            receiver.complete_message(message)

    def run() -> None:
        received = 0
        while received < count:
            messages = receiver.receive_messages(max_message_count=200, max_wait_time=5)
            if not messages:
                raise RuntimeError(f"only {received} of {count} messages arrived")
            if complete:
                for message in messages:
                    receiver.complete_message(message)
            received += len(messages)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=10000)
    args = parser.parse_args()
    n = args.messages
    print(f"1 KB bodies, {n} messages per phase, batched sends, prefetch 500")
    print("(links are opened before timing; CPU is per message of the phase)\n")
    sdk_ceiling(n)
    peek_lock, delete = ServiceBusReceiveMode.PEEK_LOCK, ServiceBusReceiveMode.RECEIVE_AND_DELETE
    with (
        emulator() as (connection_string, pid),
        ServiceBusClient.from_connection_string(connection_string) as client,
    ):
        meter = Meter(pid)
        rounds = (
            ("send (batches) to queue", "receive+complete (peek-lock)", peek_lock, True),
            ("send (batches) to queue, again", "receive (receive-and-delete)", delete, False),
        )
        for send_label, receive_label, mode, complete in rounds:
            with client.get_queue_sender("bench-queue") as sender:
                meter.measure(send_label, n, sender_phase(sender, n))
            with client.get_queue_receiver(
                "bench-queue", prefetch_count=500, receive_mode=mode
            ) as receiver:
                meter.measure(receive_label, n, receiver_phase(receiver, n, complete=complete))
        fan = n // 2
        props = {"model_name": "local-analyzer", "priority": "high"}
        with client.get_topic_sender("bench-topic") as sender:
            meter.measure("topic send, fan-out to 3 subs", fan, sender_phase(sender, fan, **props))
        for subscription in ("everything", "by-model", "by-sql"):
            with client.get_subscription_receiver(
                "bench-topic", subscription, prefetch_count=500, receive_mode=delete
            ) as receiver:
                meter.measure(
                    f"  receive copies from {subscription}",
                    fan,
                    receiver_phase(receiver, fan, complete=False),
                )


if __name__ == "__main__":
    main()
