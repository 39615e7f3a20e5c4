"""The producer CLI against the project's Service Bus emulator and Azurite, through the real
azure-servicebus and azure-storage-blob SDKs.

The tests run on an emulator of their own (the app's three request queues, copied once per
test under a prefix of its own), so the 10,000 messages they leave behind meet no other
test's queue. What arrived is read from the emulator's runtime counts and by receiving.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusReceivedMessage

from shared.adapters.blob_storage import AzureBlobStore
from shared.contracts import ClaimCheck, RequestMessage
from shared.entrypoints.cli.producer import main
from shared.intake.claim_checks import ClaimChecks
from shared.settings import Settings
from tests.fixtures.azurite import Azurite
from tests.fixtures.servicebus_emulator import DEFAULT_CONFIG, ServiceBusEmulator

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
PREFIXES = ("bulk", "claim", "lanes", "invalid", "single")
LANE_SETTINGS = {
    "RequestsQueueName": "inference-requests",
    "PriorityQueueName": "inference-priority",
    "OrderedQueueName": "inference-ordered",
}
BULK_REQUESTS = 10_000


def queue_name(prefix: str, app_name: str) -> str:
    return f"{prefix}-{app_name}"


@pytest.fixture(scope="session")
def producer_emulator(
    tmp_path_factory: pytest.TempPathFactory,
    servicebus_emulator_factory: Callable[[Path | str], ServiceBusEmulator],
) -> ServiceBusEmulator:
    """An emulator with the app's request queues (infra/local) once per prefix."""
    config = json.loads(DEFAULT_CONFIG.read_text())
    [namespace] = config["UserConfig"]["Namespaces"]
    app_queues = [q for q in namespace["Queues"] if q["Name"] in LANE_SETTINGS.values()]
    assert len(app_queues) == 3, "infra/local lacks a lane's queue"
    namespace["Queues"] = [
        {**copy.deepcopy(queue), "Name": queue_name(prefix, queue["Name"])}
        for prefix in PREFIXES
        for queue in app_queues
    ]
    namespace["Topics"] = []
    path = tmp_path_factory.mktemp("producer-emulator") / "servicebus-emulator.json"
    path.write_text(json.dumps(config))
    return servicebus_emulator_factory(path)


def lane_values(prefix: str) -> dict[str, str]:
    return {key: queue_name(prefix, name) for key, name in LANE_SETTINGS.items()}


def producer_settings(azurite: Azurite, emulator: ServiceBusEmulator, prefix: str) -> Settings:
    return Settings.model_validate(
        {
            "Storage": azurite.connection_string,
            "ServiceBusConnection": emulator.connection_string,
            "AllowedModels": "local-analyzer",
            "ProducerTenants": "contoso",  # the lines' tenant: direct producers may name it
            **lane_values(prefix),
        }
    )


def run(argv: list[str], settings: Settings, capsys: pytest.CaptureFixture[str]) -> Any:
    """Run the CLI in this process; (exit code, the JSON summary)."""
    code = main([*argv, "--json", "--no-progress"], settings)
    return code, json.loads(capsys.readouterr().out)


def active(emulator: ServiceBusEmulator, queue: str) -> int:
    return int(emulator.runtime_properties(queue)["active_message_count"])


def requests_file(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def receive(
    emulator: ServiceBusEmulator,
    queue: str,
    count: int,
    *,
    session_id: str | None = None,
    max_wait_time: float = 5,
) -> list[ServiceBusReceivedMessage]:
    """Receive (and complete) up to ``count`` messages of a queue, or of one session."""
    with (
        ServiceBusClient.from_connection_string(emulator.connection_string) as bus,
        bus.get_queue_receiver(queue, session_id=session_id, max_wait_time=5) as receiver,
    ):
        received = receiver.receive_messages(max_message_count=count, max_wait_time=max_wait_time)
        for message in received:
            receiver.complete_message(message)
    return received


def request_of(message: ServiceBusReceivedMessage) -> RequestMessage:
    return RequestMessage.model_validate_json(b"".join(message.body))


def line(number: int, **fields: Any) -> str:
    document = {
        "tenant_id": "contoso",
        "model": "local-analyzer",
        "input": {"text": f"Invoice {number}: 300 EUR due within 30 days."},
        **fields,
    }
    return json.dumps(document)


def test_ten_thousand_requests_go_in_batches_and_a_rerun_adds_nothing(
    azurite: Azurite,
    producer_emulator: ServiceBusEmulator,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = producer_settings(azurite, producer_emulator, "bulk")
    queue = settings.queues.requests
    requests = requests_file(tmp_path, [line(n) for n in range(BULK_REQUESTS)])

    code, summary = run(["--file", str(requests)], settings, capsys)

    assert code == 0
    assert summary["sent"] == BULK_REQUESTS
    assert summary["batches"] > 1
    assert summary["queues"] == {queue: {"sent": BULK_REQUESTS, "batches": summary["batches"]}}
    assert active(producer_emulator, queue) == BULK_REQUESTS

    code, again = run(["--file", str(requests)], settings, capsys)

    assert code == 0
    assert again["sent"] == BULK_REQUESTS  # the broker took them, and dropped every one
    assert active(producer_emulator, queue) == BULK_REQUESTS
    with (
        ServiceBusClient.from_connection_string(producer_emulator.connection_string) as bus,
        bus.get_queue_receiver(queue) as receiver,
    ):
        [first] = receiver.peek_messages(max_message_count=1)
    body = request_of(first)
    assert first.message_id == body.request_id
    assert first.application_properties is not None
    assert first.application_properties[b"source"] == b"producer"
    assert body.input.model_dump() == {"text": "Invoice 0: 300 EUR due within 30 days."}


def test_text_too_large_for_a_message_is_sent_as_a_claim_check(
    azurite: Azurite,
    storage: AzureBlobStore,
    producer_emulator: ServiceBusEmulator,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = producer_settings(azurite, producer_emulator, "claim")
    queue = settings.queues.requests
    text = "A long contract clause. " * 14_000  # 336,000 bytes
    requests = requests_file(tmp_path, [line(1), line(2, input={"text": text})])

    code, summary = run(["--file", str(requests)], settings, capsys)

    assert code == 0
    assert (summary["sent"], summary["claim_checked"]) == (2, 1)
    with (
        ServiceBusClient.from_connection_string(producer_emulator.connection_string) as bus,
        bus.get_queue_sender(queue) as sender,
    ):
        # What the broker's attach advertised (max-message-size), as the SDK read it.
        limit = sender.create_message_batch().max_size_in_bytes
    received = receive(producer_emulator, queue, 2)
    assert limit == 256 * 1024
    assert len(text) > limit
    bodies = [b"".join(message.body) for message in received]
    moved = [RequestMessage.model_validate_json(b) for b in bodies if b"blob_uri" in b]
    [request] = moved
    assert isinstance(request.input, ClaimCheck)
    assert max(len(b) for b in bodies) < limit
    assert request.input.sha256 == hashlib.sha256(text.encode()).hexdigest()
    stored = ClaimChecks(storage, "inputs", ("inputs",), 10**7).open(request.input, "contoso")
    assert stored == text.encode()


def test_an_invalid_line_is_refused_with_exit_code_1_and_the_rest_still_go(
    azurite: Azurite, producer_emulator: ServiceBusEmulator, tmp_path: Path
) -> None:
    settings = producer_settings(azurite, producer_emulator, "invalid")
    requests = requests_file(
        tmp_path, [line(1), line(2, priority="urgent"), "", line(4, input={"text": ""}), line(5)]
    )
    environment = {
        **os.environ,
        "INFERBUS_LOCAL_SETTINGS": str(tmp_path / "none.json"),
        "ServiceBusConnection": producer_emulator.connection_string,
        "Storage": azurite.connection_string,
        "AllowedModels": "local-analyzer",
        "ProducerTenants": "contoso",
        **lane_values("invalid"),
    }

    finished = subprocess.run(
        [sys.executable, "-m", "shared.producer", "--file", str(requests)],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert finished.returncode == 1, finished.stderr
    assert "sent 2 (the broker drops ids it has seen in the last 10 minutes)" in finished.stdout
    assert "line 2: invalid request (priority:" in finished.stdout
    assert "line 4: invalid request (input.text:" in finished.stdout
    assert "producer: 2 sent" in finished.stderr  # progress (stderr is not a terminal)
    assert active(producer_emulator, settings.queues.requests) == 2


def test_high_priority_and_ordered_documents_land_on_their_lanes(
    azurite: Azurite,
    producer_emulator: ServiceBusEmulator,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = producer_settings(azurite, producer_emulator, "lanes")
    requests = requests_file(
        tmp_path,
        [
            line(1),
            line(2, priority="high"),
            line(3, priority="low"),
            line(4, document_id="contract-a"),
            line(5, document_id="contract-b", priority="high"),
            line(6, document_id="contract-a"),
        ],
    )

    code, summary = run(["--file", str(requests)], settings, capsys)

    assert code == 0
    assert summary["queues"] == {
        settings.queues.requests: {"sent": 2, "batches": 1},
        settings.queues.priority: {"sent": 1, "batches": 1},
        settings.queues.ordered: {"sent": 3, "batches": 1},  # one batch, two sessions
    }
    assert active(producer_emulator, settings.queues.priority) == 1
    sessions = {
        session: receive(
            producer_emulator, settings.queues.ordered, 10, session_id=session, max_wait_time=2
        )
        for session in ("contract-a", "contract-b")
    }
    assert all(m.session_id == session for session, ms in sessions.items() for m in ms)
    assert {
        session: [request_of(message).input.model_dump()["text"] for message in messages]
        for session, messages in sessions.items()
    } == {
        "contract-a": [
            "Invoice 4: 300 EUR due within 30 days.",
            "Invoice 6: 300 EUR due within 30 days.",
        ],
        "contract-b": ["Invoice 5: 300 EUR due within 30 days."],
    }


def test_one_request_from_flags_for_a_blob_of_the_account(
    azurite: Azurite,
    storage: AzureBlobStore,
    producer_emulator: ServiceBusEmulator,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = producer_settings(azurite, producer_emulator, "single")
    document = b"%PDF-1.7 a scanned contract"
    storage.upload("incoming", "contoso/scan.pdf", document, "application/pdf", {})
    uri = f"{storage.account_url}/incoming/contoso/scan.pdf"
    flags = ["--tenant", "contoso", "--model", "local-analyzer", "--blob-uri", uri]
    options = [
        "--priority",
        "high",
        "--request-id",
        "order-4711",
        "--parameters",
        '{"summary_sentences": 1}',
    ]

    code, summary = run([*flags, *options], settings, capsys)

    assert code == 0
    assert summary["request_ids"] == ["order-4711"]
    assert summary["queues"] == {settings.queues.priority: {"sent": 1, "batches": 1}}
    [message] = receive(producer_emulator, settings.queues.priority, 1)
    body = request_of(message)
    assert message.message_id == "order-4711"
    assert body.parameters == {"summary_sentences": 1}
    assert body.input == ClaimCheck(
        blob_uri=uri,
        sha256=hashlib.sha256(document).hexdigest(),
        size=len(document),
        media_type="application/pdf",
    )
