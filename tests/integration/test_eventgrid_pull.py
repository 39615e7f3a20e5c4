"""The Event Grid namespace pull door through the real SDK against the namespace emulator.

The emulator runs the repo's namespace (infra/local/eventgrid-namespace.json) at a time
scale of 1/20: a 60 s lock lasts 3 s, a 10 s release delay half a second. Work goes in
through ``EventGridPublisherClient`` as a producer would, and comes out on the real
request queue (the Service Bus emulator) and in Azurite.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AzureKeyCredential
from azure.core.messaging import CloudEvent
from azure.eventgrid import EventGridConsumerClient, EventGridPublisherClient

from eventgrid_emulator.process import EventGridEmulator
from eventgrid_emulator.pytest_plugin import EventGridEmulatorFactory
from local_processes import Azurite
from shared.adapters.blob_storage import AzureBlobStore
from shared.adapters.in_memory import RecordingSender
from shared.contracts import Door
from shared.entrypoints.bootstrap import Services
from shared.events.announcements import Announcement, cloud_events
from shared.events.incoming import IncomingEvent
from shared.events.intake import EventIntake, EventOutcome
from shared.events.pull import PullDoor, PullPolicy
from tests.fakes import broker_down
from tests.integration.conftest import InstallServices
from tests.support.events import requested_event
from tests.support.servicebus import QueueRecorder

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NAMESPACE_CONFIG = REPO / "infra" / "local" / "eventgrid-namespace.json"
TIME_SCALE = 0.05
TOPIC, SUBSCRIPTION = "inference-requests", "app-pull"


@pytest.fixture(scope="module")
def namespace(
    eventgrid_emulator_factory: EventGridEmulatorFactory, azurite: Azurite
) -> EventGridEmulator:
    return eventgrid_emulator_factory(
        NAMESPACE_CONFIG, storage=azurite.connection_string, time_scale=TIME_SCALE
    )


def consumer(
    namespace: EventGridEmulator, topic: str, subscription: str
) -> EventGridConsumerClient:
    return EventGridConsumerClient(
        namespace.endpoint,
        AzureKeyCredential(namespace.access_key),
        namespace_topic=topic,
        subscription=subscription,
    )


def publish(namespace: EventGridEmulator, *events: dict[str, Any]) -> None:
    with EventGridPublisherClient(
        namespace.endpoint, AzureKeyCredential(namespace.access_key), namespace_topic=TOPIC
    ) as publisher:
        publisher.send([CloudEvent.from_dict(event) for event in events])


@pytest.fixture
def empty_subscription(namespace: EventGridEmulator) -> EventGridEmulator:
    """Acknowledge whatever an earlier test left in the app's subscription."""
    with consumer(namespace, TOPIC, SUBSCRIPTION) as client:
        while received := client.receive(max_events=100, max_wait_time=10):
            client.acknowledge(lock_tokens=[d.broker_properties.lock_token for d in received])
    return namespace


def pull_settings(namespace: EventGridEmulator) -> dict[str, str]:
    return {
        "EventGridPull__namespaceEndpoint": namespace.endpoint,
        "EventGridPull__key": namespace.access_key,
        "EventGridPull__drainSeconds": "3",
    }


@pytest.fixture
def pulling(
    install_services: InstallServices, empty_subscription: EventGridEmulator, sender: QueueRecorder
) -> Services:
    return install_services(settings=pull_settings(empty_subscription))


def door_of(services: Services) -> PullDoor:
    assert services.pull_door is not None, "the pull door is configured"
    return services.pull_door


def test_published_events_become_one_job_each_and_are_acknowledged(
    pulling: Services, empty_subscription: EventGridEmulator, sender: QueueRecorder, tenant: str
) -> None:
    first = requested_event(tenant, "evt-1")
    publish(empty_subscription, first, first, requested_event(tenant, "evt-2"))

    report = door_of(pulling).drain()

    assert report.outcomes["accepted"] == 2
    assert report.outcomes["duplicate"] == 1
    assert report.lost_locks == 0
    assert len(sender.sent) == 2
    counts = empty_subscription.runtime(TOPIC, SUBSCRIPTION)
    assert counts["available"] == counts["locked"] == 0, counts


def test_a_transient_failure_releases_the_event_and_its_redelivery_is_accepted(
    install_services: InstallServices, empty_subscription: EventGridEmulator, tenant: str
) -> None:
    broker = RecordingSender(fail_with=broker_down())
    services = install_services(
        ports={"requests": broker}, settings=pull_settings(empty_subscription)
    )
    queue = services.ports.event_queue  # the app's adapter over the SDK
    assert queue is not None
    one_receive = PullDoor(queue, services.event_intake, PullPolicy(drain_seconds=0))
    publish(empty_subscription, requested_event(tenant))

    assert one_receive.drain().outcomes == {"released": 1}
    broker.fail_with = None
    time.sleep(10 * TIME_SCALE + 0.3)  # the 10 s release delay, scaled
    with consumer(empty_subscription, TOPIC, SUBSCRIPTION) as client:
        (redelivered,) = client.receive(max_events=10, max_wait_time=10)
        assert redelivered.broker_properties.delivery_count == 2
        client.release(lock_tokens=[redelivered.broker_properties.lock_token])

    assert door_of(services).drain().outcomes == {"accepted": 1}
    assert len(broker.sent) == 1


def test_an_invalid_event_is_rejected_to_the_dead_letter_container(
    pulling: Services, empty_subscription: EventGridEmulator, storage: AzureBlobStore, tenant: str
) -> None:
    invalid = requested_event(tenant, "evt-bad", input={"text": ""})
    publish(empty_subscription, invalid)

    assert door_of(pulling).drain().outcomes == {"rejected": 1}

    container = pulling.settings.containers.eventgrid_dead_letters
    prefix = f"inferbus-local/{TOPIC}/{SUBSCRIPTION}/"
    deadline = time.monotonic() + 10
    while not (names := storage.list_names(container, prefix)) and time.monotonic() < deadline:
        time.sleep(0.2)
    letters = [storage.read(container, name) or b"" for name in names]
    assert any(b"evt-bad" in letter for letter in letters), names


class SlowIntake:
    """The app's intake, taking ``seconds`` per event (a slow dependency)."""

    def __init__(self, intake: EventIntake, seconds: float) -> None:
        self._intake = intake
        self._seconds = seconds

    def accept_event(self, event: IncomingEvent, source: Door = Door.EVENTGRID) -> EventOutcome:
        time.sleep(self._seconds)
        return self._intake.accept_event(event, source)


@pytest.mark.parametrize(("renewal", "expect_lost"), [(1.0, False), (1000.0, True)])
def test_slow_intake_keeps_its_locks_by_renewing_them(
    pulling: Services,
    empty_subscription: EventGridEmulator,
    tenant: str,
    renewal: float,
    expect_lost: bool,
) -> None:
    """Intake taking 4 s per event outlasts the 3 s (scaled) lock unless it is renewed."""
    publish(empty_subscription, *(requested_event(tenant) for _ in range(3)))
    queue = pulling.ports.event_queue  # the app's adapter over the SDK
    assert queue is not None
    slow = SlowIntake(pulling.event_intake, 4)
    door = PullDoor(queue, slow, PullPolicy(drain_seconds=1, lock_renewal_seconds=renewal))  # type: ignore[arg-type]

    report = door.drain()

    assert report.received == 3
    assert (report.lost_locks > 0) is expect_lost, report.summary()


def test_result_events_published_to_the_namespace_reach_a_pull_consumer(
    install_services: InstallServices, namespace: EventGridEmulator, tenant: str
) -> None:
    services = install_services(
        settings={
            "EventGridTopic__topicEndpoint": namespace.endpoint,
            "EventGridTopic__topicKey": namespace.access_key,
            "EventGridTopic__namespaceTopic": "inference-results",
        }
    )
    assert services.ports.events is not None
    announcement = Announcement(
        request_id="r-1", tenant_id=tenant, model="local-analyzer", outcome="completed",
        priority="normal", document_type="invoice",
    )  # fmt: skip
    services.ports.events.publish(cloud_events(announcement))

    with consumer(namespace, "inference-results", "results-pull") as client:
        received = client.receive(max_events=100, max_wait_time=10)
        client.acknowledge(lock_tokens=[d.broker_properties.lock_token for d in received])
    mine = [d.event for d in received if (d.event.data or {}).get("tenant_id") == tenant]
    assert [(e.type, e.subject) for e in mine] == [
        ("com.inferbus.InferenceCompleted", f"/tenants/{tenant}/models/local-analyzer/requests/r-1")
    ]
