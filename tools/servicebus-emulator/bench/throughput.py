"""Throughput of the local Service Bus emulator through the unmodified SDK.

Phases, each run once per repeat (interleaved: A, B, C..., A, B, C...), every figure the
median of the repeats with its spread, ``median [min..max]``:

* send (batches) to a queue;
* receive+complete, peek-lock, prefetch 500, batches of 200: the emulator's best case;
* **SDK ceiling, the app's way**: receive with the app's host.json
  ``extensions.serviceBus.prefetchCount`` and ``maxMessageBatchSize`` the way the Service
  Bus extension (and the local host's listener) receives for a batch function (a first
  message, then what else arrives within 20 ms) and complete each message on its own
  through the SDK: the settle round trip included. Messages look like the app's request
  messages (a ~600 B JSON body and its application properties). This is the Service Bus
  side of the app's local limit (bench/end_to_end.py measures the same on the app's own
  queue);
* receive (receive-and-delete);
* topic send fanning out to 3 subscriptions (SQL and correlation filters), then receiving
  the copies of each subscription;
* client codec only, no broker: building+encoding send batches and decoding a received
  payload in this process. It is what the SDK's encoding costs alone, a floor of the
  client's CPU per message; it is not a ceiling of anything that talks to a broker.

CPU per message of the emulator process and of this client process (from /proc) says which
side a phase is bound by. The last line compares the app's way with the best case, repeat
by repeat: below 1, the app's prefetch and batch size leave broker capacity unused. Links
are opened before each timed part. Figures only: nothing here asserts a speed.

Run: ``.venv/bin/python tools/servicebus-emulator/bench/throughput.py [--messages 5000]
[--repeats 5] [--host-json PATH]`` (default: the repository's host.json; Microsoft's
defaults, prefetch 0 and batches of 1000, when there is none).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
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
# A batch function's receive: the first message, then what arrives within 20 ms (the .NET
# SDK's AMQP batch wait, which the Service Bus extension and the local host use); the
# SDK's socket timeout must be as short for the window to hold.
BATCH_WINDOW_S = 0.02
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
REPO_HOST_JSON = Path(__file__).resolve().parents[3] / "host.json"
# A request message of the app: JSON body of about 600 B and its application properties.
APP_BODY = json.dumps(
    {
        "schema": "inferbus.request/v1",
        "request_id": str(uuid.uuid4()),
        "tenant_id": "contoso",
        "model": "local-analyzer",
        "input": {
            "blob_uri": "http://127.0.0.1:10000/devstoreaccount1/inputs/contoso/" + "0" * 36,
            "sha256": "0" * 64,
            "size": 1424,
            "media_type": "text/plain; charset=utf-8",
        },
        "parameters": {},
        "priority": "normal",
        "not_before": None,
        "deadline": "2026-01-01T00:00:00Z",
        "metadata": {},
        "after": None,
    }
).encode()
APP_PROPERTIES: dict[str | bytes, Any] = {
    "priority": "normal",
    "model_name": "local-analyzer",
    "tenant": "contoso",
    "retry_count": 0,
    "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
    "schema_version": "inferbus.request/v1",
    "source": "http",
}


def bench_config() -> dict[str, object]:
    queue = {"Name": "bench-queue", "Properties": {"LockDuration": "PT1M", "MaxDeliveryCount": 10}}
    # Like the app's request queue: duplicate detection on (message ids are checked).
    app_queue = {
        "Name": "app-queue",
        "Properties": {
            "LockDuration": "PT1M",
            "MaxDeliveryCount": 10,
            "RequiresDuplicateDetection": True,
            "DuplicateDetectionHistoryTimeWindow": "PT10M",
        },
    }
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
            "Namespaces": [
                {"Name": "sbemulatorns", "Queues": [queue, app_queue], "Topics": [topic]}
            ]
        }
    }


def app_batch_settings(host_json: Path) -> tuple[int, int, str]:
    """(prefetchCount, maxMessageBatchSize, where they come from) of a host.json."""
    if not host_json.is_file():
        return 0, 1000, f"Microsoft's defaults ({host_json} not found)"
    section = json.loads(host_json.read_text()).get("extensions", {}).get("serviceBus", {})
    prefetch = int(section.get("prefetchCount", 0))
    batch = int(section.get("maxMessageBatchSize", 1000))
    return prefetch, batch, str(host_json)


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
    """Per phase and repeat: msg/s, and CPU us/msg of the emulator and of this process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.figures: dict[str, list[tuple[float, float, float]]] = {}

    def measure(self, name: str, count: int, work: Callable[[], None]) -> None:
        broker0, client0, wall0 = process_cpu(self.pid), time.process_time(), time.perf_counter()
        work()
        wall = time.perf_counter() - wall0
        broker = (process_cpu(self.pid) - broker0) / count * 1e6
        client = (time.process_time() - client0) / count * 1e6
        self.figures.setdefault(name, []).append((count / wall, broker, client))

    def record(self, name: str, rate: float) -> None:
        self.figures.setdefault(name, []).append((rate, float("nan"), float("nan")))

    def print(self) -> None:
        width = max(len(name) for name in self.figures)
        header = "msg/s: median [min..max]"
        print(f"{'phase':<{width}} {header:>30}   emulator   client (us/msg, medians)")
        for name, rows in self.figures.items():
            rates = [row[0] for row in rows]
            text = f"{statistics.median(rates):,.0f} [{min(rates):,.0f}..{max(rates):,.0f}]"
            broker = statistics.median(row[1] for row in rows)
            client = statistics.median(row[2] for row in rows)
            cpu = "" if math.isnan(broker) else f"{broker:>8.0f} {client:>8.0f}"
            print(f"{name:<{width}} {text:>30}   {cpu}")
        print(f"({len(rows)} repeats)")


def codec_only(meter: Meter, count: int) -> None:
    """What the client alone costs: batch encoding for send, payload decoding for receive."""
    start = time.perf_counter()
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
    meter.record("client codec only: build+encode batches", count / (time.perf_counter() - start))
    single = ServiceBusMessage(BODY, application_properties={"n": 1})
    wire = bytearray()
    encode_payload(wire, PyamqpTransport.to_outgoing_amqp_message(single._raw_amqp_message))
    payload = memoryview(bytes(wire))
    start = time.perf_counter()
    for _ in range(count):
        decode_payload(payload)
    meter.record("client codec only: decode a payload", count / (time.perf_counter() - start))


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


def receiver_phase(
    receiver: Any, count: int, complete: bool, batch: int = 200, window: float | None = None
) -> Callable[[], None]:
    """Opens the link and takes the warm-up message before the timed part starts.

    With ``window``, each batch is received as the Service Bus extension (and the local
    host) receives for a batch function: a first message, then what else arrives within
    ``window`` seconds, up to ``batch`` (two SDK calls: one would collect for 200 ms)."""
    for message in receiver.receive_messages(max_message_count=1, max_wait_time=10):
        if complete:
            receiver.complete_message(message)

    def run() -> None:
        received = 0
        while received < count:
            limit = min(batch, count - received)
            if window is None:
                messages = receiver.receive_messages(max_message_count=limit, max_wait_time=5)
            else:
                messages = receiver.receive_messages(max_message_count=1, max_wait_time=5)
                if messages and limit > 1:
                    messages += receiver.receive_messages(
                        max_message_count=limit - 1, max_wait_time=window
                    )
            if not messages:
                raise RuntimeError(f"only {received} of {count} messages arrived")
            if complete:
                for message in messages:
                    receiver.complete_message(message)
            received += len(messages)

    return run


def fill_app_queue(client: ServiceBusClient, count: int) -> None:
    """``count`` + 1 app-shaped messages (distinct ids: the queue detects duplicates)."""
    with client.get_queue_sender("app-queue") as sender:
        batch = sender.create_message_batch()
        for _ in range(count + 1):
            message = ServiceBusMessage(
                APP_BODY,
                message_id=str(uuid.uuid4()),
                application_properties=dict(APP_PROPERTIES),
                content_type="application/json",
            )
            try:
                batch.add_message(message)
            except ValueError:
                sender.send_messages(batch)
                batch = sender.create_message_batch()
                batch.add_message(message)
        sender.send_messages(batch)


def one_repeat(meter: Meter, client: ServiceBusClient, n: int, prefetch: int, batch: int) -> None:
    peek_lock, delete = ServiceBusReceiveMode.PEEK_LOCK, ServiceBusReceiveMode.RECEIVE_AND_DELETE
    with client.get_queue_sender("bench-queue") as sender:
        meter.measure("send (batches) to queue", n, sender_phase(sender, n))
    with client.get_queue_receiver(
        "bench-queue", prefetch_count=500, receive_mode=peek_lock
    ) as receiver:
        meter.measure(
            "receive+complete (prefetch 500, batches of 200)",
            n,
            receiver_phase(receiver, n, complete=True),
        )
    fill_app_queue(client, n)  # not timed
    with client.get_queue_receiver(
        "app-queue", prefetch_count=prefetch, socket_timeout=BATCH_WINDOW_S
    ) as receiver:
        meter.measure(
            f"SDK ceiling: receive+complete, app's way (prefetch {prefetch}, batch {batch})",
            n,
            receiver_phase(receiver, n, complete=True, batch=batch, window=BATCH_WINDOW_S),
        )
    with client.get_queue_sender("bench-queue") as sender:
        sender_phase(sender, n)()  # not timed
    with client.get_queue_receiver(
        "bench-queue", prefetch_count=500, receive_mode=delete
    ) as receiver:
        meter.measure("receive (receive-and-delete)", n, receiver_phase(receiver, n, False))
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
    codec_only(meter, n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=5000, help="messages per phase (5000)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of every phase (5)")
    parser.add_argument("--host-json", type=Path, default=REPO_HOST_JSON)
    args = parser.parse_args()
    n = args.messages
    prefetch, batch, source = app_batch_settings(args.host_json)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(
        f"emulator throughput ({stamp}, {os.cpu_count()} CPUs, load average {load}): "
        f"{n} messages per phase, {args.repeats} repeats interleaved"
    )
    print(f"the app's receive settings from {source}: prefetchCount {prefetch}, "
          f"maxMessageBatchSize {batch}\n")  # fmt: skip
    with (
        emulator() as (connection_string, pid),
        ServiceBusClient.from_connection_string(connection_string) as client,
    ):
        meter = Meter(pid)
        for _ in range(args.repeats):
            one_repeat(meter, client, n, prefetch, batch)
    meter.print()
    app_way = next(rows for name, rows in meter.figures.items() if name.startswith("SDK ceiling"))
    best = meter.figures["receive+complete (prefetch 500, batches of 200)"]
    ratios = [a[0] / b[0] for a, b in zip(app_way, best, strict=True)]
    print(
        f"the app's way / the emulator's best case (receive+complete, prefetch 500): "
        f"{statistics.median(ratios):.2f} [{min(ratios):.2f}..{max(ratios):.2f}]"
    )


if __name__ == "__main__":
    main()
