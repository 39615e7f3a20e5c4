"""The Event Grid pull door: events/s from a namespace queue subscription into intake.

What it measures. ``--events`` ``com.inferbus.InferenceRequested`` CloudEvents are
published to the namespace emulator's ``inference-requests`` topic (the repo's
infra/local namespace) before the local host starts; the host serves a snapshot of the
app with the request processor disabled, so the pull door's timer (every second here)
drains the ``app-pull`` subscription through intake: dedupe marker, claim check, job,
request message. Throughput runs from the first acknowledged event to the last, read from
the emulator's runtime counts (nothing polls the app). Fresh in-memory Azurite, Service
Bus emulator and namespace emulator per repeat.

What it compares against, in the same run and interleaved with it: the namespace
emulator's own ceiling for the same batches, the SDK's ``EventGridConsumerClient``
receiving ``EventGridPull__maxEvents`` at a time and acknowledging each batch in one call,
with no intake in between. The ratio says how much of the broker's rate the door keeps;
CPU per event (the host and its worker, Azurite, both emulators) says what binds it.

Run: ``.venv/bin/python bench/eventgrid_pull.py [--events 400] [--repeats 3]``.
How to read: ``median [min..max, n=repeats]``. Figures only, nothing is asserted.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _harness import (
    PROCESSOR,
    REPO,
    TENANT,
    TEXT,
    CpuMeter,
    Services,
    app_snapshot,
    argument_parser,
    create_containers,
    machine,
    now_stamp,
    ratio,
    running_host,
    services,
    spread,
    work_folder,
)
from azure.core.credentials import AzureKeyCredential
from azure.core.messaging import CloudEvent
from azure.eventgrid import EventGridConsumerClient, EventGridPublisherClient

from eventgrid_emulator.process import EventGridEmulator, EventGridEmulatorProcess

NAMESPACE_CONFIG = REPO / "infra" / "local" / "eventgrid-namespace.json"
TOPIC, SUBSCRIPTION = "inference-requests", "app-pull"
MAX_EVENTS = 32  # EventGridPull__maxEvents, the app's default
PUBLISH_BATCH = 100


@contextmanager
def namespace(work: Path, name: str, storage: str) -> Iterator[tuple[EventGridEmulator, int]]:
    """A fresh namespace emulator: (its endpoint and key, its pid)."""
    process = EventGridEmulatorProcess(
        NAMESPACE_CONFIG, work / f"{name}-eventgrid.log", storage=storage
    )
    try:
        yield process.wait_ready(), process.child.process.pid
    finally:
        process.stop()


def publish(emulator: EventGridEmulator, count: int) -> None:
    events = [
        CloudEvent(
            source="/bench/producer",
            type="com.inferbus.InferenceRequested",
            id=str(uuid.uuid4()),
            data={"tenant_id": TENANT, "model": "local-analyzer", "input": {"text": TEXT}},
        )
        for _ in range(count)
    ]
    credential = AzureKeyCredential(emulator.access_key)
    with EventGridPublisherClient(emulator.endpoint, credential, namespace_topic=TOPIC) as client:
        for start in range(0, count, PUBLISH_BATCH):
            client.send(events[start : start + PUBLISH_BATCH])


def wait_acknowledged(emulator: EventGridEmulator, count: int, timeout: float) -> float:
    """Seconds from the first acknowledged event to the last (polling the runtime counts)."""
    first: float | None = None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = int(emulator.runtime(TOPIC, SUBSCRIPTION)["acknowledged"])
        now = time.monotonic()
        if done and first is None:
            first = now
        if done >= count and first is not None:
            return now - first
        time.sleep(0.02)
    raise TimeoutError(
        f"only {emulator.runtime(TOPIC, SUBSCRIPTION)} of {count} events acknowledged in {timeout}s"
    )


def door_run(stack: Services, work: Path, events: int, repeat: int) -> tuple[float, float]:
    """(events/s through the door, host CPU ms per event)."""
    with namespace(work, f"door-{repeat}", stack.storage) as (emulator, emulator_pid):
        publish(emulator, events)
        values = stack.values(
            **{
                "EventGridPull__namespaceEndpoint": emulator.endpoint,
                "EventGridPull__key": emulator.access_key,
                "EventGridPullSchedule": "* * * * * *",
                "MaxQueueBacklog": "0",
            }
        )
        create_containers(stack.storage, values)
        script_root = app_snapshot(work / f"app-{repeat}")
        with running_host(script_root, values, work, f"host-{repeat}", [PROCESSOR]) as host:
            meter = CpuMeter({"host": host.pid, "eventgrid": emulator_pid})
            meter.start()
            seconds = wait_acknowledged(emulator, events, timeout=300)
            used = meter.stop()
    return (events - 1) / seconds, 1000 * used["host"] / events


def ceiling_run(stack: Services, work: Path, events: int, repeat: int) -> float:
    """Events/s the namespace emulator delivers and takes back with no intake between."""
    with namespace(work, f"ceiling-{repeat}", stack.storage) as (emulator, _):
        publish(emulator, events)
        credential = AzureKeyCredential(emulator.access_key)
        with EventGridConsumerClient(
            emulator.endpoint, credential, namespace_topic=TOPIC, subscription=SUBSCRIPTION
        ) as client:
            started = time.monotonic()
            done = 0
            while done < events:
                batch = client.receive(max_events=MAX_EVENTS, max_wait_time=10)
                client.acknowledge(lock_tokens=[d.broker_properties.lock_token for d in batch])
                done += len(batch)
            return events / (time.monotonic() - started)


def main() -> int:
    parser = argument_parser(__doc__)
    parser.add_argument("--events", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"eventgrid_pull ({now_stamp()}, {machine()}): {args.events} events x {args.repeats} "
        f"repeats, batches of {MAX_EVENTS}, request processor disabled"
    )
    door: list[float] = []
    ceiling: list[float] = []
    cpu: list[float] = []
    with work_folder("bench-pull-") as work:
        for repeat in range(1, args.repeats + 1):
            with services(work, f"ceiling-{repeat}") as stack:
                ceiling.append(ceiling_run(stack, work, args.events, repeat))
            with services(work, f"door-{repeat}") as stack:
                rate, host_ms = door_run(stack, work, args.events, repeat)
            door.append(rate)
            cpu.append(host_ms)
            print(
                f"  repeat {repeat}: door {rate:7.1f} events/s, ceiling {ceiling[-1]:7.1f} "
                f"events/s, ratio {ratio(rate, ceiling[-1]):.2f}; host CPU {host_ms:.1f} ms/event"
            )
    ratios = [ratio(d, c) for d, c in zip(door, ceiling, strict=True)]
    print(f"pull -> intake:                      {spread(door, unit=' events/s')}")
    print(f"local limit, namespace receive+ack:  {spread(ceiling, unit=' events/s')}")
    print(f"ratio door / limit:                  {spread(ratios, digits=2)}")
    print(f"host+worker CPU per event:           {spread(cpu, unit=' ms')}")
    print(f"finished {now_stamp()}, {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
