"""A request whose message was lost is sent again by the job watchdog and completes.

Against Azurite and the Service Bus emulator through the real SDK: a request is accepted
over HTTP, its message is then received and completed by the test (lost, as when the
emulator restarts without its data), and the watchdog, with a clock 25 minutes ahead
(past JobResend__afterSeconds), rebuilds it from the job record; the registered trigger
then runs it to completion.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusReceiver

from shared.adapters.blob_storage import AzureBlobStore
from shared.contracts import JobStatus
from shared.events.announcements import Announcer
from shared.job_index import JobIndex
from shared.processing.endings import JobEndings
from shared.processing.resends import RESENT_SETTLEMENT, JobResender, ResendPolicy
from shared.processing.watchdog import JobWatchdog, WatchdogPolicy
from tests.fixtures.servicebus_emulator import DEFAULT_CONFIG, ServiceBusEmulator
from tests.integration.conftest import Call, InstallServices, json_body
from tests.support.functions import indexed_functions
from tests.support.servicebus import ReceiverMessageActions, connect, drain

pytestmark = pytest.mark.integration

QUEUE = "inference-requests"
DUPLICATE_WINDOW_SECONDS = 2


@pytest.fixture(scope="module")
def short_window_emulator(
    servicebus_emulator_factory: Callable[[Path | str], ServiceBusEmulator],
    tmp_path_factory: pytest.TempPathFactory,
) -> ServiceBusEmulator:
    config = json.loads(DEFAULT_CONFIG.read_text())
    for queue in config["UserConfig"]["Namespaces"][0]["Queues"]:
        queue["Properties"]["DuplicateDetectionHistoryTimeWindow"] = (
            f"PT{DUPLICATE_WINDOW_SECONDS}S"
        )
    path = tmp_path_factory.mktemp("short-window") / "servicebus-emulator.json"
    path.write_text(json.dumps(config))
    return servicebus_emulator_factory(path)


@pytest.fixture
def bus(short_window_emulator: ServiceBusEmulator) -> Iterator[ServiceBusClient]:
    with connect(short_window_emulator) as client:
        drain(client, QUEUE)
        yield client


def lose_every_message(bus: ServiceBusClient) -> list[str]:
    """Receive and complete what the queue holds: the messages are gone."""
    lost: list[str] = []
    receiver: ServiceBusReceiver
    with bus.get_queue_receiver(QUEUE, max_wait_time=5) as receiver:
        for received in receiver.receive_messages(max_message_count=10, max_wait_time=5):
            lost.append(str(received.message_id))
            receiver.complete_message(received)
    return lost


def run_the_trigger(bus: ServiceBusClient, expected: int) -> list[tuple[str, str]]:
    trigger = indexed_functions()["process_requests"].get_user_function()
    settled: list[tuple[str, str]] = []
    deadline = time.monotonic() + 20
    receiver: ServiceBusReceiver
    with bus.get_queue_receiver(QUEUE) as receiver:
        while len(settled) < expected and time.monotonic() < deadline:
            messages = receiver.receive_messages(max_message_count=10, max_wait_time=1)
            actions = ReceiverMessageActions(receiver)
            if messages:
                trigger(messages=messages, message_actions=actions)
            settled += actions.calls
    return settled


def test_a_lost_message_is_resent_from_the_job_and_the_request_completes(
    install_services: InstallServices,
    short_window_emulator: ServiceBusEmulator,
    storage: AzureBlobStore,
    bus: ServiceBusClient,
    call: Call,
    tenant: str,
) -> None:
    suffix = uuid.uuid4().hex[:10]
    jobs_container, ledger = f"jobs-{suffix}", f"ledger-{suffix}"
    storage.ensure_containers([jobs_container, ledger])
    services = install_services(
        emulator=short_window_emulator, JobsContainer=jobs_container, LedgerContainer=ledger
    )
    body = {"model": "local-analyzer", "input": {"text": "Invoice 9. Total due: 80 EUR."}}
    accepted = call("submit_request", "POST", "/v1/requests", body=body)
    assert accepted.status_code == 202
    request_id = json_body(accepted)["id"]
    assert lose_every_message(bus) == [request_id]
    time.sleep(DUPLICATE_WINDOW_SECONDS + 1)  # past the window, as 20 minutes are past 10

    def ahead() -> datetime:
        return datetime.now(UTC) + timedelta(minutes=25)

    counted: list[str] = []
    settings = services.settings
    documents = services.ports.documents
    watchdog = JobWatchdog(
        index=JobIndex(documents, jobs_container),
        documents=documents,
        checkpoint_container=ledger,
        jobs=services.jobs,
        endings=JobEndings(services.jobs, Announcer(None, None), ahead),
        policy=WatchdogPolicy(timedelta(seconds=900), timedelta(hours=25)),
        clock=ahead,
        resender=JobResender(
            sender=services.ports.requests,
            jobs=services.jobs,
            policy=ResendPolicy.from_settings(settings),
            count_resent=counted.append,
            clock=ahead,
        ),
    )
    assert watchdog.watch().outcomes == {"resent": 1}
    assert counted == ["standard"]
    assert services.jobs.get(tenant, request_id).settlement == (
        f"{RESENT_SETTLEMENT} (attempt 1 of {settings.job_resend.max_attempts})"
    )

    assert run_the_trigger(bus, 1) == [("complete", request_id)]
    job = services.jobs.get(tenant, request_id)
    assert job.status is JobStatus.COMPLETED
    assert job.result is not None
