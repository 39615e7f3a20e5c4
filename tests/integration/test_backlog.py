"""Backpressure from the real queue depth, read from the emulator's runtime counts."""

from __future__ import annotations

import logging
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from shared import telemetry
from shared.adapters.queue_counts import (
    EmulatorBacklogProbe,
    EmulatorQueueObserver,
    lane_backlog_probes,
)
from shared.entrypoints.bootstrap import queue_entity_readers
from shared.errors import ConfigurationError
from shared.lanes import Lane
from shared.processing.backlog import report_backlog
from tests.fixtures.azurite import Azurite
from tests.fixtures.servicebus_emulator import ServiceBusEmulator
from tests.integration.conftest import (
    Call,
    InstallServices,
    MakeBatchLane,
    json_body,
    make_settings,
)
from tests.support.servicebus import connect, drain
from tests.support.telemetry import collected_points

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"
PRIORITY_QUEUE = "inference-priority"
ORDERED_QUEUE = "inference-ordered"
TEXT = {"model": "local-analyzer", "input": {"text": "one more"}}


def test_intake_answers_503_once_the_queue_holds_the_limit(
    call: Call, install_services: InstallServices, servicebus_emulator: ServiceBusEmulator
) -> None:
    install_services(
        ServiceBusRuntimeCountsUrl=f"{servicebus_emulator.admin_url}/runtime",
        MaxQueueBacklog="3",
        BacklogCacheSeconds="0",
    )
    with connect(servicebus_emulator) as bus:
        drain(bus, QUEUE)
        statuses = [
            call("submit_request", "POST", "/v1/requests", body=TEXT).status_code for _ in range(5)
        ]
        problem = json_body(call("submit_request", "POST", "/v1/requests", body=TEXT))
        assert len(drain(bus, QUEUE)) == 3
    assert statuses == [202, 202, 202, 503, 503]
    assert "the standard lane's request backlog is 3 messages (limit 3)" in problem["detail"]


def _fill(bus: ServiceBusClient, queue: str, count: int) -> None:
    """``count`` messages in ``queue`` (fresh ids: the queues detect duplicates)."""
    with bus.get_queue_sender(queue) as sender:
        sender.send_messages(
            [ServiceBusMessage(b"x", message_id=uuid.uuid4().hex) for _ in range(count)]
        )


def _take_session(bus: ServiceBusClient, document_id: str) -> int:
    """Receive and complete an ordered document's messages; how many there were."""
    with bus.get_queue_receiver(ORDERED_QUEUE, session_id=document_id) as receiver:
        taken = receiver.receive_messages(max_message_count=10, max_wait_time=2)
        for message in taken:
            receiver.complete_message(message)
    return len(taken)


def test_each_lane_is_gated_on_its_own_queue_and_limit(
    call: Call, install_services: InstallServices, servicebus_emulator: ServiceBusEmulator
) -> None:
    install_services(
        ServiceBusRuntimeCountsUrl=f"{servicebus_emulator.admin_url}/runtime",
        MaxQueueBacklog="2",
        MaxPriorityQueueBacklog="2",
        MaxOrderedQueueBacklog="0",
        BacklogCacheSeconds="0",
    )
    high = {**TEXT, "priority": "high"}
    ordered = {**TEXT, "document_id": "doc-1"}
    with connect(servicebus_emulator) as bus:
        for queue in (QUEUE, PRIORITY_QUEUE):
            drain(bus, queue)
        _fill(bus, QUEUE, 2)  # the standard lane is full
        standard = call("submit_request", "POST", "/v1/requests", body=TEXT)
        # High priority is admitted while standard is full, up to its own limit.
        highs = [
            call("submit_request", "POST", "/v1/requests", body=high).status_code for _ in range(3)
        ]
        refused_high = call("submit_request", "POST", "/v1/requests", body=high)
        # The ordered lane has no limit (0): a full standard queue does not refuse it.
        ordered_status = call("submit_request", "POST", "/v1/requests", body=ordered).status_code
        queued = {queue: len(drain(bus, queue)) for queue in (QUEUE, PRIORITY_QUEUE)}
        _take_session(bus, "doc-1")
    assert standard.status_code == 503
    assert (
        "the standard lane's request backlog is 2 messages (limit 2)"
        in (json_body(standard)["detail"])
    )
    assert highs == [202, 202, 503]
    assert refused_high.status_code == 503
    assert refused_high.headers["Retry-After"]
    assert (
        "the priority lane's request backlog is 2 messages (limit 2)"
        in (json_body(refused_high)["detail"])
    )
    assert ordered_status == 202
    assert queued == {QUEUE: 2, PRIORITY_QUEUE: 2}, "nothing refused was queued"


def test_the_ordered_lane_is_gated_on_the_ordered_queue(
    call: Call, install_services: InstallServices, servicebus_emulator: ServiceBusEmulator
) -> None:
    counts_url = f"{servicebus_emulator.admin_url}/runtime"
    already = EmulatorBacklogProbe(counts_url, ORDERED_QUEUE).queue_depth().active
    install_services(
        ServiceBusRuntimeCountsUrl=counts_url,
        MaxQueueBacklog="0",
        MaxOrderedQueueBacklog=str(already + 1),
        BacklogCacheSeconds="0",
    )
    ordered = {**TEXT, "document_id": "doc-ordered-gate"}
    with connect(servicebus_emulator) as bus:
        statuses = [
            call("submit_request", "POST", "/v1/requests", body=ordered).status_code
            for _ in range(2)
        ]
        taken = _take_session(bus, "doc-ordered-gate")
        plain = call("submit_request", "POST", "/v1/requests", body=TEXT).status_code
        drain(bus, QUEUE)
    assert statuses == [202, 503]
    assert taken == 1
    assert plain == 202, "the standard lane has no limit here"


def test_global_batch_work_is_gated_by_the_queue_it_travels(
    call: Call, make_batch_lane: MakeBatchLane, servicebus_emulator: ServiceBusEmulator
) -> None:
    make_batch_lane(
        ServiceBusRuntimeCountsUrl=f"{servicebus_emulator.admin_url}/runtime",
        MaxQueueBacklog="1",
        MaxPriorityQueueBacklog="5",
        BacklogCacheSeconds="0",
    )
    batch = {"model": "local-analyzer", "input": {"text": "a batch line"}, "mode": "batch"}
    with connect(servicebus_emulator) as bus:
        for queue in (QUEUE, PRIORITY_QUEUE):
            drain(bus, queue)
        _fill(bus, QUEUE, 1)
        normal = call("submit_request", "POST", "/v1/requests", body=batch)
        high = call("submit_request", "POST", "/v1/requests", body={**batch, "priority": "high"})
        drain(bus, QUEUE)
    assert normal.status_code == 503
    assert (
        "the standard lane's request backlog is 1 messages (limit 1)"
        in (json_body(normal)["detail"])
    )
    assert high.status_code == 202, high.get_body()


def test_the_probe_reads_the_emulator_and_refuses_non_loopback_urls(
    servicebus_emulator: ServiceBusEmulator,
) -> None:
    with connect(servicebus_emulator) as bus:
        drain(bus, QUEUE)
        with bus.get_queue_sender(QUEUE) as sender:
            sender.send_messages([ServiceBusMessage(b"x", message_id=f"m{n}") for n in range(2)])
            later = datetime.now(UTC) + timedelta(hours=1)
            scheduled = sender.schedule_messages(ServiceBusMessage(b"y", message_id="s"), later)
            probe = EmulatorBacklogProbe(f"{servicebus_emulator.admin_url}/runtime", QUEUE)
            depth = probe.queue_depth()
            sender.cancel_scheduled_messages(scheduled)
        assert (depth.active, depth.scheduled, depth.ahead) == (2, 1, 3)
        drain(bus, QUEUE)
    with pytest.raises(ConfigurationError):
        EmulatorBacklogProbe("http://10.0.0.5:5300/runtime", QUEUE)


def test_without_a_counts_url_azure_uses_the_management_api(azurite: Azurite) -> None:
    settings = make_settings(
        azurite,
        ServiceBusConnection="",
        **{"ServiceBusConnection__fullyQualifiedNamespace": "ns.servicebus.windows.net"},
        MaxQueueBacklog="100",
    )
    probe = lane_backlog_probes(settings)[Lane.STANDARD]
    assert type(probe).__name__ == "QueueBacklogProbe"


def test_the_minute_report_reads_the_queue_on_the_emulator(
    servicebus_emulator: ServiceBusEmulator,
) -> None:
    with connect(servicebus_emulator) as bus:
        drain(bus, QUEUE)
        with bus.get_queue_sender(QUEUE) as sender:
            sender.send_messages([ServiceBusMessage(b"x", message_id=f"r{n}") for n in range(3)])
        observer = EmulatorQueueObserver(f"{servicebus_emulator.admin_url}/runtime", QUEUE)
        deadline = time.monotonic() + 10
        while True:  # until the oldest message has aged a second (no fixed sleep)
            line = report_backlog(QUEUE, observer)
            age = float(line.rsplit("oldest_age_seconds=", 1)[1])
            if age >= 1.0 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        drain(bus, QUEUE)
    assert f"queue={QUEUE} active=3 " in line
    assert 1.0 <= age < 30


def test_one_unreadable_queue_leaves_every_other_entitys_gauges(
    install_services: InstallServices,
    servicebus_emulator: ServiceBusEmulator,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The priority lane names a queue the emulator does not have: only its points go."""
    services = install_services(
        ServiceBusRuntimeCountsUrl=f"{servicebus_emulator.admin_url}/runtime",
        PriorityQueueName="no-such-queue",
    )
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    telemetry.QueueGauges(lambda: queue_entity_readers(services)).register(meter)

    with caplog.at_level(logging.WARNING, logger="shared.telemetry"):
        points = collected_points(reader)

    exported: dict[str, set[str]] = {}
    for name in telemetry.QUEUE_GAUGES:
        for point in points.get(name, []):
            exported.setdefault(point.attributes["messaging.destination.name"], set()).add(name)
    subscriptions = {
        f"inference-results/{name}"
        for name in ("high-priority", "human-review", "audit", "model-local-analyzer")
    }
    every_gauge = set(telemetry.QUEUE_GAUGES)
    assert exported == {entity: every_gauge for entity in {QUEUE, ORDERED_QUEUE} | subscriptions}
    assert sum(len(gauges) for gauges in exported.values()) == 30
    failures = {
        point.attributes["messaging.destination.name"]: point.value
        for point in points[telemetry.QUEUE_UNREADABLE]
    }
    assert failures == {"no-such-queue": 1}
    assert [r.getMessage() for r in caplog.records if "no-such-queue" in r.getMessage()] == [
        "the counts of no-such-queue cannot be read (HTTPError: HTTP Error 404: Not Found); "
        "its queue gauges are left out until they can"
    ]
