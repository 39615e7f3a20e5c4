"""Intake over in-memory ports: claim check, job, message, idempotency, enqueue failure."""

from __future__ import annotations

import hashlib
import json

import pytest

from shared.adapters.in_memory import FixedBacklog, InMemoryDocuments, RecordingSender
from shared.contracts import JobStatus
from shared.documents import Document, Tags
from shared.errors import (
    Conflict,
    InvalidInput,
    PayloadTooLarge,
    ServiceUnavailable,
    TransientError,
    UnknownModel,
)
from shared.intake.idempotency import hash_key
from shared.intake.submissions import BlobReference, InlineContent, Submission
from shared.lanes import Lane
from shared.messaging import OutgoingMessage
from tests.fakes import broker_down
from tests.support.wiring import Wired, wire

TEXT = b"Invoice 12: 300 EUR due within 30 days."
ACCOUNT = "https://acct.blob.core.windows.net"


def text_submission(tenant: str = "contoso", **changes: object) -> Submission:
    fields: dict[str, object] = {
        "tenant_id": tenant,
        "model": "local-analyzer",
        "content": InlineContent(TEXT, "text/plain; charset=utf-8"),
    }
    fields.update(changes)
    return Submission(**fields)  # type: ignore[arg-type]


def test_a_submission_stores_its_claim_check_records_its_job_and_sends_one_message(
    wired: Wired,
) -> None:
    accepted = wired.services.http.requests.intake.submit(text_submission(priority="high"))

    job = accepted.job
    assert accepted.replayed is False
    assert job.status is JobStatus.ACCEPTED
    assert wired.services.jobs.get("contoso", job.id) == job, "the job is stored"
    stored = wired.blobs.info("inputs", f"contoso/{job.id}")
    assert stored is not None
    assert wired.blobs.read("inputs", f"contoso/{job.id}") == TEXT
    assert stored.metadata["sha256"] == hashlib.sha256(TEXT).hexdigest()

    (message,) = wired.queue.sent
    body = json.loads(message.body)
    assert message.message_id == job.id
    assert message.correlation_id == job.correlation_id
    assert body["input"]["blob_uri"] == f"{wired.blobs.account_url}/inputs/contoso/{job.id}"
    assert body["input"]["sha256"] == hashlib.sha256(TEXT).hexdigest()
    assert "text" not in body["input"], "the message carries the reference, not the text"
    properties = message.application_properties
    assert (properties["tenant"], properties["model_name"], properties["priority"]) == (
        "contoso",
        "local-analyzer",
        "high",
    )


def test_the_same_key_and_body_give_the_same_job_and_never_a_second_message(
    wired: Wired,
) -> None:
    first = wired.services.http.requests.intake.submit(
        text_submission(idempotency_key="order-1", request_hash="h1")
    )
    again = wired.services.http.requests.intake.submit(
        text_submission(idempotency_key="order-1", request_hash="h1")
    )

    assert again.replayed is True
    assert again.job == first.job
    assert [m.message_id for m in wired.queue.sent] == [first.job.id]
    marker = wired.documents.load("idempotency", f"contoso/{hash_key('order-1')}.json")
    assert marker is not None
    assert marker[0]["request_id"] == first.job.id


def test_the_same_key_with_another_body_is_a_conflict_and_keys_are_per_tenant(
    wired: Wired,
) -> None:
    wired.services.http.requests.intake.submit(
        text_submission(idempotency_key="k", request_hash="h1")
    )
    with pytest.raises(Conflict) as reused:
        wired.services.http.requests.intake.submit(
            text_submission(idempotency_key="k", request_hash="h2")
        )
    assert reused.value.code == "idempotency_key_reused"

    other = wired.services.http.requests.intake.submit(
        text_submission("fabrikam", idempotency_key="k", request_hash="h2")
    )
    assert other.replayed is False
    assert len(wired.queue.sent) == 2


def test_a_failed_send_records_no_job_releases_the_key_and_is_503() -> None:
    wired = wire()
    wired.queue.fail_with = broker_down()

    with pytest.raises(ServiceUnavailable) as unavailable:
        wired.services.http.requests.intake.submit(
            text_submission(idempotency_key="k", request_hash="h")
        )

    assert isinstance(unavailable.value, TransientError)
    assert unavailable.value.retry_after == 5
    assert wired.documents.list_names("jobs", "contoso/") == [], "nothing was accepted"
    assert wired.documents.list_names("idempotency", "contoso/") == [], "the key is released"

    wired.queue.fail_with = None
    retried = wired.services.http.requests.intake.submit(
        text_submission(idempotency_key="k", request_hash="h")
    )
    assert retried.replayed is False
    assert [m.message_id for m in wired.queue.sent] == [retried.job.id]
    assert [n.split("/")[1] for n in wired.documents.list_names("jobs", "contoso/")] == [
        f"{retried.job.id}.json"
    ]


def test_a_referenced_blob_of_the_tenant_becomes_the_claim_check(wired: Wired) -> None:
    wired.blobs.upload("incoming", "contoso/letter.txt", TEXT, "text/plain", {})
    uri = f"{wired.blobs.account_url}/incoming/contoso/letter.txt"

    accepted = wired.services.http.requests.intake.submit(
        text_submission(content=BlobReference(uri))
    )

    assert accepted.job.input is not None
    assert accepted.job.input.blob_uri == uri  # type: ignore[union-attr]
    assert accepted.job.input.sha256 == hashlib.sha256(TEXT).hexdigest()  # type: ignore[union-attr]
    assert wired.blobs.list_names("inputs", "") == [], "nothing is copied"


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        (f"{ACCOUNT}/incoming/fabrikam/letter.txt", "tenant"),
        (f"{ACCOUNT}/results/contoso/letter.txt", "container"),
        ("https://evil.example/incoming/contoso/letter.txt", "storage account"),
        (f"{ACCOUNT}/incoming/contoso/absent.txt", "no such blob"),
    ],
)
def test_a_blob_reference_outside_the_tenant_space_is_refused_before_anything_is_written(
    wired: Wired, uri: str, why: str
) -> None:
    wired.blobs.upload("incoming", "fabrikam/letter.txt", TEXT, "text/plain", {})
    wired.blobs.upload("results", "contoso/letter.txt", TEXT, "text/plain", {})
    with pytest.raises(InvalidInput, match=why):
        wired.services.http.requests.intake.submit(text_submission(content=BlobReference(uri)))
    assert wired.documents.list_names("jobs", "") == []
    assert wired.queue.sent == []


def test_invalid_submissions_are_refused_with_their_field_named(wired: Wired) -> None:
    with pytest.raises(UnknownModel):
        wired.services.http.requests.intake.submit(text_submission(model="gpt-9"))
    with pytest.raises(InvalidInput) as too_late:
        wired.services.http.requests.intake.submit(text_submission(deadline_seconds=86_401))
    assert too_late.value.fields[0].field == "deadline_seconds"
    big = wire(MaxUploadBytes="10")
    big.blobs.upload("incoming", "contoso/big.txt", TEXT, "text/plain", {})
    with pytest.raises(PayloadTooLarge):
        big.services.http.requests.intake.submit(
            text_submission(content=BlobReference(f"{ACCOUNT}/incoming/contoso/big.txt"))
        )
    assert wired.queue.sent == []
    assert big.queue.sent == []


def test_fault_injection_is_refused_unless_the_development_stack_enables_it() -> None:
    production = wire()
    with pytest.raises(InvalidInput) as refused:
        production.services.http.requests.intake.submit(
            text_submission(parameters={"simulate": {"permanent": True}})
        )
    assert refused.value.fields[0].field == "parameters.simulate"
    assert production.queue.sent == []

    development = wire(LocalModelFaults="true")
    accepted = development.services.http.requests.intake.submit(
        text_submission(parameters={"simulate": {"permanent": True}})
    )
    assert accepted.job.parameters == {"simulate": {"permanent": True}}

    # Faults are raised by the processor before any model runs: any alias takes them there.
    openai = wire(
        LocalModelFaults="true",
        ModelProvider="azure_openai",
        settings={
            "AzureOpenAI__endpoint": "https://x.openai.azure.com",
            "AzureOpenAI__apiKey": "k",
        },
    )
    accepted = openai.services.http.requests.intake.submit(
        text_submission(parameters={"simulate": {"transient_attempts": 1}})
    )
    assert accepted.job.parameters == {"simulate": {"transient_attempts": 1}}
    with pytest.raises(InvalidInput) as bad:
        openai.services.http.requests.intake.submit(
            text_submission(parameters={"simulate": {"often": 1}})
        )
    assert bad.value.fields[0].field == "parameters.simulate.often"


def test_a_full_queue_is_503_before_anything_is_stored() -> None:
    backlog = FixedBacklog(depth=10)
    wired = wire(MaxQueueBacklog="10", ports={"backlogs": {Lane.STANDARD: backlog}})
    with pytest.raises(ServiceUnavailable):
        wired.services.http.requests.intake.submit(text_submission())
    assert wired.blobs.stored == {}
    assert wired.queue.sent == []
    backlog.depth = 9
    wire_again = wire(MaxQueueBacklog="10", ports={"backlogs": {Lane.STANDARD: backlog}})
    assert (
        wire_again.services.http.requests.intake.submit(text_submission()).job.status
        is JobStatus.ACCEPTED
    )


class JobsAtSend(RecordingSender):
    """Notes which jobs existed each time a message was sent."""

    def __init__(self, documents: InMemoryDocuments) -> None:
        super().__init__()
        self.documents = documents
        self.jobs_at_send: list[list[str]] = []

    def send(self, message: OutgoingMessage) -> None:
        self.jobs_at_send.append(self.documents.list_names("jobs", ""))
        super().send(message)


class JobWritesFail(InMemoryDocuments):
    def create(
        self, container: str, name: str, document: Document, tags: Tags | None = None
    ) -> str | None:
        if container == "jobs":
            raise TransientError("storage is unavailable")
        return super().create(container, name, document, tags)


def test_the_message_is_sent_before_the_job_is_recorded() -> None:
    """A job exists only for work the broker took (no orphan job when the send fails)."""
    documents = InMemoryDocuments()
    sender = JobsAtSend(documents)
    wired = wire(ports={"documents": documents, "requests": sender})

    accepted = wired.services.http.requests.intake.submit(text_submission())

    assert sender.jobs_at_send == [[]]
    assert wired.documents.list_names("jobs", "") == [f"contoso/{accepted.job.id}.json"]


def test_queued_work_is_accepted_even_when_its_job_cannot_be_recorded() -> None:
    """The processor records the job from the message (processing.adopted_jobs)."""
    wired = wire(ports={"documents": JobWritesFail()})

    accepted = wired.services.http.requests.intake.submit(text_submission())

    assert accepted.job.status is JobStatus.ACCEPTED
    assert [m.message_id for m in wired.queue.sent] == [accepted.job.id]
    assert wired.queue.sent[0].application_properties["source"] == "http"
