"""Benchmarks of the batch processor. Prints figures; asserts nothing about speed.

1. Per-message overhead of the pipeline with in-memory ports (no I/O): parse, job CAS
   updates, claim-check verification, the local model, result and announcements.
2. Throughput through the Service Bus emulator and Azurite with the local model, A/B
   interleaved over repeats (medians printed): A receives batches with the SDK and runs
   the batch use case in-process (what the trigger calls); B is the local host with the
   real Functions runtime (the worker process decodes model binding data, settlement goes
   over gRPC to the host's receiver), timed from "Host started" until the queue is empty.
3. Work amplification with 2% poison messages: per-message settlement versus an
   all-or-nothing batch baseline, where one poison message sends the whole batch back
   (healthy messages reprocessed per poison message).

Run: ``.venv/bin/python bench/batch_processing.py [--messages 400] [--batch 32]``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from shared.adapters.in_memory import (  # noqa: E402
    InMemoryBlobs,
    InMemoryDocuments,
    RecordingPublisher,
    RecordingSender,
    RecordingSettler,
)
from shared.adapters.local_model import LocalModel  # noqa: E402
from shared.contracts import ClaimCheck, Job, RequestMessage  # noqa: E402
from shared.events.announcements import Announcer  # noqa: E402
from shared.intake.claim_checks import ClaimChecks  # noqa: E402
from shared.jobs import DocumentJobStore, JobRepository  # noqa: E402
from shared.processing.deferral import DocumentDeferralLedger  # noqa: E402
from shared.processing.inbound import InboundMessage  # noqa: E402
from shared.processing.pipeline import MessageProcessor, ProcessingPolicy  # noqa: E402
from shared.results import ResultStore  # noqa: E402

TEXT = (
    "Invoice 2291 for consulting services. The total amount due is 4,200 EUR, payable within "
    "30 days. Late payment incurs interest. Please quote the invoice number with your payment. "
) * 8  # about 1.4 KB


def in_memory_processor(
    count: int,
) -> tuple[MessageProcessor, list[InboundMessage], RecordingSettler]:
    now = datetime.now(UTC)
    blobs = InMemoryBlobs()
    documents = InMemoryDocuments(blobs)
    store = DocumentJobStore(documents, "jobs")
    processor = MessageProcessor(
        policy=ProcessingPolicy("q", ("local-analyzer",), 3, 1.0, 10.0),
        jobs=JobRepository(store),
        claim_checks=ClaimChecks(blobs, "inputs", ("inputs",), 1 << 20),
        model=LocalModel(),
        results=ResultStore(blobs, "results"),
        announcer=Announcer(RecordingPublisher(), RecordingSender()),
        retry_sender=RecordingSender(),
        ledger=DocumentDeferralLedger(documents, "ledgers"),
    )
    messages = []
    for n in range(count):
        request_id = f"r{n}"
        data = TEXT.encode()
        blobs.upload("inputs", f"t/{request_id}", data, "text/plain", {})
        check = ClaimCheck(
            blob_uri=f"{blobs.account_url}/inputs/t/{request_id}",
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            media_type="text/plain",
        )
        store.create(
            Job(
                id=request_id,
                tenant_id="t",
                model="local-analyzer",
                correlation_id="c",
                created_at=now,
                updated_at=now,
                deadline=now + timedelta(hours=1),
            )
        )
        body = RequestMessage(
            request_id=request_id, tenant_id="t", model="local-analyzer", input=check
        )
        messages.append(
            InboundMessage(
                body=body.model_dump_json(by_alias=True).encode(),
                message_id=request_id,
                sequence_number=n,
                delivery_count=1,
                enqueued_time=now,
                application_properties={"tenant": "t"},
            )
        )
    return processor, messages, RecordingSettler()


def bench_overhead(count: int) -> None:
    processor, messages, settler = in_memory_processor(count)
    timings = []
    for message in messages:
        started = time.perf_counter()
        processor.process(message, settler)
        timings.append(time.perf_counter() - started)
    completed = sum(1 for action in settler.actions if action[0] == "complete")
    timings.sort()
    mean_ms = statistics.mean(timings) * 1e3
    p50_ms = timings[len(timings) // 2] * 1e3
    p99_ms = timings[int(len(timings) * 0.99)] * 1e3
    rate = count / sum(timings)
    print(f"pipeline overhead, in-memory ports, {count} messages of {len(TEXT)} B:")
    print(
        f"  {completed} completed; mean {mean_ms:.3f} ms  p50 {p50_ms:.3f} ms  p99 {p99_ms:.3f} ms"
    )
    print(f"  -> {rate:,.0f} msg/s on one thread")


def bench_amplification(count: int, batch_size: int, poison_rate: float = 0.02) -> None:
    """Healthy messages processed again per poison message, both settlement styles.

    All-or-nothing: a batch containing a poison message is abandoned whole, so its healthy
    messages come back; the poison message is redelivered until the broker's max delivery
    count (10) dead-letters it. Per-message: the poison message is dead-lettered on sight.
    Batches are re-formed from whatever is available, as a receiver would.
    """
    poison_every = round(1 / poison_rate)
    poisons = {n for n in range(count) if n % poison_every == poison_every // 2}
    max_delivery = 10

    def run(all_or_nothing: bool) -> tuple[int, int]:
        pending = list(range(count))
        deliveries = dict.fromkeys(pending, 0)
        healthy_work = 0
        while pending:
            batch, pending = pending[:batch_size], pending[batch_size:]
            for n in batch:
                deliveries[n] += 1
            healthy_work += sum(1 for n in batch if n not in poisons)
            bad = [n for n in batch if n in poisons]
            if all_or_nothing and bad:
                back = [n for n in batch if deliveries[n] < max_delivery or n not in poisons]
                pending = back + pending  # the whole batch is abandoned and redelivered
        healthy = count - len(poisons)
        return healthy_work - healthy, len(poisons)

    per_extra, poison_count = run(False)
    all_extra, _ = run(True)
    print(
        f"work amplification, {count} messages, {len(poisons)} poison ({poison_rate:.0%}), "
        f"batches of {batch_size}:"
    )
    for label, extra in (
        ("per-message settlement", per_extra),
        ("all-or-nothing batches", all_extra),
    ):
        per_poison = extra / poison_count
        print(f"  {label}: {extra} healthy messages reprocessed ({per_poison:.1f} per poison)")


@contextlib.contextmanager
def local_stack() -> Iterator[tuple[str, Any]]:
    """Azurite and the Service Bus emulator on free ports (as the test fixtures start them)."""
    from devtools.stack import EMULATOR_CONFIG
    from local_processes import run_azurite
    from servicebus_emulator.process import run_emulator

    with run_azurite(REPO) as storage, run_emulator(EMULATOR_CONFIG) as emulator:
        yield storage.connection_string, emulator


def _settings_values(storage: str, emulator: Any) -> dict[str, str]:
    sample = json.loads((REPO / "local.settings.sample.json").read_text())["Values"]
    return sample | {
        "AzureWebJobsStorage": storage,
        "Storage": storage,
        "ServiceBusConnection": emulator.connection_string,
        "ServiceBusRuntimeCountsUrl": f"{emulator.admin_url}/runtime",
        "MaxQueueBacklog": "0",
        "ModelConcurrency": "8",
    }


def _submit(services: Any, count: int) -> float:
    """Submit ``count`` requests through intake; returns the intake rate (req/s)."""
    from shared.intake.submissions import InlineContent, Submission

    tenant = f"bench-{uuid.uuid4().hex[:6]}"
    started = time.perf_counter()
    for _ in range(count):
        services.intake.submit(
            Submission(
                tenant_id=tenant,
                model="local-analyzer",
                content=InlineContent(TEXT.encode(), "text/plain"),
            )
        )
    return count / (time.perf_counter() - started)


def _direct_run(settings: Any, emulator: Any, count: int, batch_size: int) -> float:
    """A: an SDK receiver and the batch use case in this process (what the trigger calls,
    with the receiver's settler in place of ServiceBusMessageActions); msg/s."""
    from azure.servicebus import ServiceBusClient

    from shared import entry_points
    from shared.adapters.servicebus_inbound import ReceiverSettler, from_sdk
    from shared.composition import get_services

    processed = 0
    started = time.perf_counter()
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as client,
        client.get_queue_receiver(settings.requests_queue_name) as receiver,
    ):
        settler = ReceiverSettler(receiver)
        while processed < count:
            messages = receiver.receive_messages(max_message_count=batch_size, max_wait_time=5)
            if not messages:
                break
            inbound = [from_sdk(message) for message in messages]
            entry_points.handle_request_batch(get_services, inbound, settler)
            processed += len(messages)
    return processed / (time.perf_counter() - started)


def _host_run(settings_path: Path, emulator: Any, queue: str, count: int, log: Path) -> float:
    """B: the local host with the real runtime drains the queue; msg/s from "Host started"."""
    from functions_host.process import HostProcess

    others = ("submit_request", "get_request", "get_request_result", "cancel_request",
              "event_webhook", "report_backlog", "sweep_deferred", "blob_intake",
              "eventgrid_intake")  # fmt: skip
    disabled = [arg for name in others for arg in ("--disable", name)]
    host = HostProcess(REPO, settings_path, log, keys_path=log.with_suffix(".keys"),
                       extra_args=disabled)  # fmt: skip
    try:
        host.wait_started(timeout=90)
        started = time.perf_counter()
        deadline = started + 600
        while time.perf_counter() < deadline:
            counts = emulator.runtime_properties(queue)
            if counts["active_message_count"] == 0 and counts["scheduled_message_count"] == 0:
                break
            time.sleep(0.05)
        return count / (time.perf_counter() - started)
    finally:
        host.stop(timeout=40)


def bench_throughput(count: int, repeats: int) -> None:
    from shared.composition import azure_ports, build_services, use_services
    from shared.settings import Settings

    host_json = json.loads((REPO / "host.json").read_text())
    batch_size = int(host_json["extensions"]["serviceBus"]["maxMessageBatchSize"])
    workdir = Path(tempfile.mkdtemp(prefix="inferbus-bench-host-"))
    with local_stack() as (storage, emulator):
        values = _settings_values(storage, emulator)
        settings = Settings.model_validate(values)
        settings_path = workdir / "local.settings.json"
        settings_path.write_text(json.dumps({"IsEncrypted": False, "Values": values}))
        services = build_services(settings, azure_ports(settings))
        services.blobs.ensure_containers(settings.container_names())  # type: ignore[attr-defined]
        use_services(services)
        intake: list[float] = []
        direct: list[float] = []
        hosted: list[float] = []
        for repeat in range(repeats):
            intake.append(_submit(services, count))
            direct.append(_direct_run(settings, emulator, count, batch_size))
            intake.append(_submit(services, count))
            log = workdir / f"host-{repeat}.log"
            hosted.append(
                _host_run(settings_path, emulator, settings.requests_queue_name, count, log)
            )
        use_services(None)
    a, b = statistics.median(direct), statistics.median(hosted)
    print(
        f"through the emulator + Azurite, local model, {count} requests per run, "
        f"batches of {batch_size} (host.json), ModelConcurrency 8, {repeats} repeats, medians:"
    )
    print(f"  intake (claim check + job + send): {statistics.median(intake):,.0f} req/s")
    print(f"  A batch use case in-process (SDK receiver): {a:,.1f} msg/s")
    print(f"  B local host + real runtime (gRPC settlement): {b:,.1f} msg/s")
    print(
        f"  B/A {b / a:.2f} (runs A {[round(x, 1) for x in direct]}, "
        f"B {[round(x, 1) for x in hosted]})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--batch", type=int, default=32, help="batch size of the amplification run")
    parser.add_argument("--repeats", type=int, default=3, help="A/B repeats of the stack run")
    parser.add_argument(
        "--skip-stack", action="store_true", help="skip the emulator throughput run"
    )
    args = parser.parse_args()
    bench_overhead(2000)
    bench_amplification(5000, args.batch)
    if not args.skip_stack:
        bench_throughput(args.messages, args.repeats)


if __name__ == "__main__":
    main()
