"""The enqueued-token quota over in-memory ports: planning splits files at
``GlobalBatch__enqueuedTokens``, a line the quota can never hold fails at once, and a
batch refused for the quota waits no longer than its members' deadline or
``GlobalBatch__quotaWaitLimitSeconds`` before its members fail ``batch_quota_exceeded``.
Time is the test's clock; the service is an in-memory ``BatchService`` that refuses or
accepts as the test says."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.contracts import InlineText, Job, JobStatus, ProcessingMode, RequestMessage
from shared.events.announcements import FAILED, Announcer
from shared.global_batch.conclusion import Conclusion, ConclusionPolicy
from shared.global_batch.control_plane import ControlPolicy, GlobalBatchControlPlane
from shared.global_batch.planning import PlanningPolicy
from shared.global_batch.ports import TOKEN_LIMIT_EXCEEDED, BatchError, RemoteBatch
from shared.global_batch.quota import (
    BATCH_QUOTA_EXCEEDED,
    QuotaPolicy,
    after_refusal,
    ending_status,
    line_tokens,
)
from shared.global_batch.records import Submission, SubmissionState
from shared.inference.capacity import DEFAULT_ANSWER_TOKENS, estimated_tokens
from shared.lanes import Lane
from shared.processing.endings import JobEndings
from shared.request_ids import new_request_id
from tests.fakes import ManualClock
from tests.support.global_batch import BatchEndings
from tests.support.wiring import Wired, wire

TENANT = "contoso"
DEPLOYMENT = "gpt-4o-mini-batch"
SETTINGS = {
    "GlobalBatch__deployments": f"local-analyzer={DEPLOYMENT}",
    "GlobalBatch__endpoint": "http://127.0.0.1:9",
}
START = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


@dataclass
class QuotaService:
    """``BatchService`` in memory: files and batches by id; while ``refusing``, every
    batch it is asked about has failed for the enqueued-token quota."""

    refusing: bool = False
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    batches: dict[str, str] = field(default_factory=dict)  # batch id -> input file id

    def find_file(self, filename: str, since: datetime) -> str | None:
        return next((i for i, (name, _) in self.files.items() if name == filename), None)

    def upload(self, filename: str, content: bytes, expiry_seconds: int) -> str:
        file_id = f"file-{len(self.files) + 1}"
        self.files[file_id] = (filename, content)
        return file_id

    def file_status(self, file_id: str) -> str:
        return "processed"

    def find_batch(
        self, input_file_id: str, excluding: frozenset[str], since: datetime
    ) -> RemoteBatch | None:
        for batch_id, file_id in self.batches.items():
            if file_id == input_file_id and batch_id not in excluding:
                return self.get_batch(batch_id)
        return None

    def create_batch(
        self, input_file_id: str, output_expiry_seconds: int, metadata: dict[str, str]
    ) -> RemoteBatch:
        batch_id = f"batch-{len(self.batches) + 1}"
        self.batches[batch_id] = input_file_id
        return RemoteBatch(id=batch_id, status="validating", input_file_id=input_file_id)

    def get_batch(self, batch_id: str) -> RemoteBatch:
        file_id = self.batches[batch_id]
        if not self.refusing:
            return RemoteBatch(id=batch_id, status="in_progress", input_file_id=file_id)
        message = f"The number of enqueued tokens has surpassed the configured limit of 1K for the deployment '{DEPLOYMENT}'."  # noqa: E501
        error = BatchError(code=TOKEN_LIMIT_EXCEEDED, message=message)
        return RemoteBatch(id=batch_id, status="failed", input_file_id=file_id, errors=(error,))

    def cancel_batch(self, batch_id: str) -> RemoteBatch:
        raise AssertionError("nothing is cancelled here")

    def download(self, file_id: str) -> bytes:
        return self.files[file_id][1]

    def delete_file(self, file_id: str) -> None:
        self.files.pop(file_id, None)

    def lines_of(self, file_id: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.files[file_id][1].splitlines()]


@dataclass
class GlobalBatchLane:
    wired: Wired
    clock: ManualClock
    service: QuotaService

    def submit(
        self,
        text: str = "An invoice, due in 30 days.",
        *,
        parameters: dict[str, Any] | None = None,
        deadline_seconds: float | None = None,
    ) -> str:
        """A batch-mode request as intake records it and the processor stages it: its job
        (``accepted``, mode batch) and its staged line."""
        now = self.clock()
        deadline = None if deadline_seconds is None else now + timedelta(seconds=deadline_seconds)
        request = RequestMessage(
            request_id=new_request_id(self.clock),
            tenant_id=TENANT,
            model="local-analyzer",
            input=InlineText(text=text),
            parameters=parameters or {},
            deadline=deadline,
            mode=ProcessingMode.BATCH,
        )
        job = Job(
            id=request.request_id,
            tenant_id=TENANT,
            model=request.model,
            input=request.input,
            parameters=request.parameters,
            correlation_id=request.request_id,
            created_at=now,
            updated_at=now,
            deadline=deadline,
            mode=ProcessingMode.BATCH,
        )
        assert self.wired.services.jobs.create(job) is not None
        stager = self.wired.services.lanes[Lane.STANDARD].stager
        assert stager is not None
        assert stager.stage(request, request.request_id, text.encode(), "text/plain", {})
        return request.request_id

    def line_of(self, request_id: str) -> dict[str, Any]:
        records = self.wired.services.http.batches.records
        assert records is not None
        staged = records.pending(DEPLOYMENT, TENANT, request_id)
        assert staged is not None
        return staged.line

    def control_plane(
        self,
        quota: int | None,
        *,
        retry: float = 60,
        retry_max: float = 240,
        wait_limit: float = 600,
    ) -> GlobalBatchControlPlane:
        """The control plane with the policy composition makes of these settings."""
        services, clock = self.wired.services, self.clock
        records = services.http.batches.records
        assert records is not None
        announcer = Announcer(self.wired.published, None)
        return GlobalBatchControlPlane(
            records=records,
            service=self.service,
            jobs=services.jobs,
            conclusion=Conclusion(
                records=records,
                jobs=services.jobs,
                endings=JobEndings(services.jobs, announcer, clock),
                announcer=announcer,
                requeue=self.wired.queue,
                policy=ConclusionPolicy(failed_lines="fail", max_resubmissions=2),
                catalog=services.models.catalog,
                clock=clock,
            ),
            policy=ControlPolicy(
                planning=PlanningPolicy(
                    max_lines_per_file=100,
                    max_bytes_per_file=1_000_000,
                    submit_at_lines=1,
                    submit_after=timedelta(0),
                    enqueued_tokens=quota,
                ),
                output_expiry_seconds=1_209_600,
                quota_retry=timedelta(seconds=retry),
                quota_retry_max=timedelta(seconds=retry_max),
                poll_interval=timedelta(0),
                quota_wait_limit=timedelta(seconds=wait_limit),
            ),
            clock=clock,
        )

    def submissions(self) -> list[Submission]:
        records = self.wired.services.http.batches.records
        assert records is not None
        names = self.wired.documents.list_names(records.container, "submissions/")
        found = [records.submission(n.split("/")[1].removesuffix(".json")) for n in names]
        return sorted((s for s, _ in filter(None, found)), key=lambda s: s.created_at)

    def status(self, request_id: str) -> JobStatus:
        return self.wired.services.jobs.get(TENANT, request_id).status

    def failures(self) -> dict[str, str]:
        published = self.wired.published.published
        return {e.data["request_id"]: e.data["error_code"] for e in published if e.type == FAILED}


@pytest.fixture
def lane() -> GlobalBatchLane:
    clock = ManualClock(START)
    service = QuotaService()
    return GlobalBatchLane(
        wire(clock, {"batch_service": service}, settings=SETTINGS), clock, service
    )


@pytest.fixture
def endings(monkeypatch: pytest.MonkeyPatch) -> BatchEndings:
    return BatchEndings(monkeypatch)


# --- the estimate ------------------------------------------------------------------------------


def test_a_line_is_estimated_as_the_capacity_gate_estimates_the_same_call(
    lane: GlobalBatchLane,
) -> None:
    plain = lane.line_of(lane.submit("x" * 400))
    bounded = lane.line_of(lane.submit("x" * 400, parameters={"max_tokens": 50}))
    system, user = (m["content"] for m in plain["body"]["messages"])
    assert line_tokens(plain) == estimated_tokens(system, user, {})
    assert line_tokens(plain) - line_tokens(bounded) == DEFAULT_ANSWER_TOKENS - 50
    assert bounded["body"]["max_completion_tokens"] == 50, "the name reasoning models take"


def test_a_line_bounded_under_the_older_name_counts_it_too() -> None:
    assert line_tokens({"body": {"messages": [], "max_tokens": 7}}) == 7


def test_a_line_with_text_parts_counts_their_text() -> None:
    parts = {"body": {"messages": [{"content": [{"text": "abcd" * 10}, {"image": 1}]}]}}
    assert line_tokens(parts) == 10 + DEFAULT_ANSWER_TOKENS
    assert line_tokens({"body": None}) == DEFAULT_ANSWER_TOKENS


# --- planning splits at the quota ---------------------------------------------------------------


def test_a_file_over_the_quota_is_split_so_that_each_file_fits(lane: GlobalBatchLane) -> None:
    ids = []
    for n in range(5):
        ids.append(lane.submit(f"Document {n}.", parameters={"max_tokens": 1000}))
        lane.clock.now += timedelta(seconds=1)  # staged one after the other
    one = line_tokens(lane.line_of(ids[0]))
    quota = 2 * one + one // 2  # room for two lines a file

    lane.control_plane(quota).run()

    planned = lane.submissions()
    assert all(s.estimated_tokens <= quota for s in planned)
    uploaded = sorted(
        ([line["custom_id"] for line in lane.service.lines_of(str(s.file_id))] for s in planned),
        key=lambda members: ids.index(members[0]),
    )
    assert uploaded == [ids[0:2], ids[2:4], ids[4:5]]  # oldest first, each once
    assert all(lane.status(i) is JobStatus.RUNNING for i in ids)


def test_without_a_quota_files_are_split_by_lines_and_bytes_only(lane: GlobalBatchLane) -> None:
    for n in range(3):
        lane.submit(f"Document {n}.", parameters={"max_tokens": 16_000})
    lane.control_plane(None).run()
    (planned,) = lane.submissions()
    assert planned.requests == 3
    assert planned.estimated_tokens > 3 * 16_000


def test_a_line_larger_than_the_quota_fails_at_once_and_the_others_go_out(
    lane: GlobalBatchLane, endings: BatchEndings
) -> None:
    small = [lane.submit(f"Note {n}.", parameters={"max_tokens": 100}) for n in range(2)]
    large = lane.submit("A long report. " * 200, parameters={"max_tokens": 4000})
    estimate = line_tokens(lane.line_of(large))
    quota = 3000  # both small lines fit; the large one never can

    report = lane.control_plane(quota).run()

    job = lane.wired.services.jobs.get(TENANT, large)
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.code == BATCH_QUOTA_EXCEEDED
    assert f"estimated at {estimate} tokens" in job.error.message
    assert f"quota of {quota}" in job.error.message
    assert "GlobalBatch__enqueuedTokens" in job.error.message
    assert lane.failures() == {large: BATCH_QUOTA_EXCEEDED}  # announced as every failure
    assert all(lane.status(i) is JobStatus.RUNNING for i in small)
    uploaded = [line["custom_id"] for f in lane.service.files for line in lane.service.lines_of(f)]
    assert sorted(uploaded) == sorted(small), "the large line was never sent"
    assert len(report.closed) == 1
    assert endings.counted() == {(BATCH_QUOTA_EXCEEDED, DEPLOYMENT): 1}


# --- a refusal waits, within bounds ---------------------------------------------------------------


def refused_submission(lane: GlobalBatchLane) -> Submission:
    (submission,) = lane.submissions()
    return submission


def test_a_refused_batch_waits_doubling_and_its_members_fail_past_the_wait_limit(
    lane: GlobalBatchLane, endings: BatchEndings, caplog: pytest.LogCaptureFixture
) -> None:
    ids = [lane.submit(f"Document {n}.") for n in range(2)]
    control_plane = lane.control_plane(None, retry=60, retry_max=240, wait_limit=600)
    control_plane.run()  # submitted
    lane.service.refusing = True
    waits = []
    with caplog.at_level("WARNING"):
        for _ in range(10):
            control_plane.run()  # polled: refused; or the wait is not over
            submission = refused_submission(lane)
            if submission.state is SubmissionState.CLOSED:
                break
            assert submission.retry_at is not None
            waits.append((submission.retry_at - lane.clock.now).total_seconds())
            lane.clock.now = submission.retry_at
            control_plane.run()  # created again
    assert waits == [60, 120, 240, 180]  # doubling, capped, then the limit's last try
    closed = refused_submission(lane)
    assert closed.state is SubmissionState.CLOSED
    assert closed.quota_retries == 5
    assert len(closed.refused_batches) == 5
    assert lane.clock.now - START == timedelta(seconds=600)
    for request_id in ids:
        job = lane.wired.services.jobs.get(TENANT, request_id)
        assert job.status is JobStatus.FAILED
        assert job.error is not None
        assert job.error.code == BATCH_QUOTA_EXCEEDED
        assert "GlobalBatch__quotaWaitLimitSeconds" in job.error.message
        assert "5 times" in job.error.message
    assert lane.failures() == dict.fromkeys(ids, BATCH_QUOTA_EXCEEDED)
    assert endings.counted() == {(BATCH_QUOTA_EXCEEDED, DEPLOYMENT): 1}
    assert "tries again in 0:01:00 (refusal 1), 0:10:00 left before it gives up" in caplog.text
    assert "gives up after 5 refusals" in caplog.text


def test_a_refused_batch_waits_no_longer_than_its_members_earliest_deadline(
    lane: GlobalBatchLane, endings: BatchEndings
) -> None:
    early = lane.submit("Due soon.", deadline_seconds=100)
    late = lane.submit("Due later.", deadline_seconds=10_000)
    control_plane = lane.control_plane(None, retry=60, retry_max=240, wait_limit=86_400)
    control_plane.run()
    lane.service.refusing = True
    control_plane.run()  # refused: again in 60 s
    first = refused_submission(lane)
    assert first.deadline == START + timedelta(seconds=100)
    assert first.retry_at == START + timedelta(seconds=60)
    lane.clock.now = START + timedelta(seconds=60)
    control_plane.run()  # created again, refused: 120 s would pass the deadline
    control_plane.run()
    assert refused_submission(lane).retry_at == START + timedelta(seconds=100)
    lane.clock.now = START + timedelta(seconds=100)
    control_plane.run()
    control_plane.run()  # refused at the deadline: the members fail

    assert {lane.status(early), lane.status(late)} == {JobStatus.FAILED}
    job = lane.wired.services.jobs.get(TENANT, late)
    assert job.error is not None
    assert job.error.code == BATCH_QUOTA_EXCEEDED
    assert "earliest deadline" in job.error.message
    assert endings.counted() == {(BATCH_QUOTA_EXCEEDED, DEPLOYMENT): 1}


def test_a_batch_that_is_let_in_after_a_refusal_runs_on(lane: GlobalBatchLane) -> None:
    ids = [lane.submit("Document.")]
    control_plane = lane.control_plane(None, retry=60, retry_max=240, wait_limit=600)
    control_plane.run()
    lane.service.refusing = True
    control_plane.run()
    lane.service.refusing = False
    lane.clock.now += timedelta(seconds=60)
    control_plane.run()
    submission = refused_submission(lane)
    assert submission.state is SubmissionState.SUBMITTED
    assert submission.first_refused_at == START
    assert lane.status(ids[0]) is JobStatus.RUNNING


# --- the decision itself ------------------------------------------------------------------------


def waiting(**fields: Any) -> Submission:
    return Submission(
        id="s1",
        tenant_id=TENANT,
        deployment=DEPLOYMENT,
        model="local-analyzer",
        requests=3,
        bytes=100,
        created_at=START,
        updated_at=START,
        state=SubmissionState.SUBMITTED,
        batch_id="b1",
        **fields,
    )


REFUSED = RemoteBatch(
    id="b1",
    status="failed",
    input_file_id="f1",
    errors=(BatchError(code=TOKEN_LIMIT_EXCEEDED, message="the quota is full"),),
)
POLICY = QuotaPolicy(timedelta(seconds=300), timedelta(hours=1), timedelta(days=1))


def test_many_refusals_never_overflow_the_doubling_wait() -> None:
    submission = waiting(quota_retries=10_000, first_refused_at=START)
    after = after_refusal(submission, REFUSED, START + timedelta(hours=2), POLICY)
    assert after.retry_at == START + timedelta(hours=3)


def test_a_refusal_after_the_deadline_ends_the_submission_with_the_services_reason() -> None:
    submission = waiting(deadline=START - timedelta(seconds=1))
    ended = after_refusal(submission, REFUSED, START, POLICY)
    assert ended.state is SubmissionState.ENDED
    assert ended.remote_status == "failed"
    assert [e.code for e in ended.errors] == [BATCH_QUOTA_EXCEEDED]
    assert ended.errors[0].message.endswith("the quota is full")
    assert ending_status(ended) == BATCH_QUOTA_EXCEEDED
    assert ending_status(waiting(remote_status="expired")) == "expired"
