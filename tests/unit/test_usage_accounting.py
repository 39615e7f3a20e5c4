"""Token accounting: summing finished jobs per UTC day, tenant, model and mode, reading
them through the document ports, and the ``usage`` ops command."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any, Literal

import pytest

from shared.accounting.usage import DayRange, UsageCounts, UsageKey, account
from shared.accounting.usage_report import UsageReader
from shared.adapters.in_memory import InMemoryDocuments
from shared.contracts import (
    InferenceResult,
    InlineText,
    Job,
    JobStatus,
    ProcessingMode,
    ResultDocument,
    TokenUsage,
)
from shared.documents import Document, TaggedDocuments, TagQuery
from shared.entrypoints.cli.ops import main
from shared.errors import TransientError
from shared.job_index import JobIndex, index_tags
from shared.jobs import DocumentJobStore, JobRepository, reopen, transition
from tests.fakes import ManualClock
from tests.support.documents import ReadCounting
from tests.support.jobs import usage
from tests.support.wiring import Wired, wire

DAY = date(2026, 11, 30)
NOON = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
QUEUE, BATCH = ProcessingMode.QUEUE, ProcessingMode.BATCH
CONTAINER = "jobs"
_ids = itertools.count(1)


def answer(tokens: TokenUsage | None) -> InferenceResult:
    return InferenceResult(summary="s", document_type="invoice", confidence=0.9, usage=tokens)


def accepted(tenant: str, at: datetime, model: str, mode: ProcessingMode) -> Job:
    created = at - timedelta(minutes=1)
    return Job(
        id=f"r-{next(_ids)}",
        tenant_id=tenant,
        model=model,
        input=InlineText(text="Invoice 12: 300 EUR due."),
        correlation_id="c",
        created_at=created,
        updated_at=created,
        mode=mode,
    )


def finished(
    tenant: str,
    at: datetime,
    tokens: TokenUsage | None,
    *,
    model: str = "local-analyzer",
    mode: ProcessingMode = QUEUE,
    outcome: Literal["completed", "refused"] = "completed",
    with_answer: bool = True,
) -> Job:
    """A job the processor finished at ``at`` with a result that reported ``tokens``."""
    job = accepted(tenant, at, model, mode)
    result = ResultDocument(
        request_id=job.id,
        tenant_id=tenant,
        model=model,
        outcome=outcome,
        result=answer(tokens) if with_answer else None,
        refusal={"category": "hate", "message": "no"} if outcome == "refused" else None,
        completed_at=at.isoformat(),
    )
    return transition(job, JobStatus.COMPLETED, lambda: at, result=result)


def counts(rows: list[Any]) -> dict[UsageKey, UsageCounts]:
    return {row.key: row.counts for row in rows}


# --- the summation -------------------------------------------------------------------------


def test_both_modes_of_one_tenant_and_model_are_separate_rows_with_their_sums() -> None:
    jobs = [
        finished("acme", NOON, usage(100, 20)),
        finished("acme", NOON + timedelta(hours=1), usage(50, 5)),
        finished("acme", NOON, usage(1000, 300), mode=BATCH),
    ]

    rows = counts(account(jobs, DayRange.single(DAY)))

    assert rows == {
        UsageKey(DAY, "acme", "local-analyzer", QUEUE): UsageCounts(2, 150, 25, 175, 0),
        UsageKey(DAY, "acme", "local-analyzer", BATCH): UsageCounts(1, 1000, 300, 1300, 0),
    }


def test_a_refusal_counts_with_its_tokens_and_a_result_without_usage_is_counted_apart() -> None:
    jobs = [
        finished("acme", NOON, usage(40, 2), outcome="refused"),
        finished("acme", NOON, None, outcome="refused", with_answer=False),
        finished("acme", NOON, None),
        finished("acme", NOON, usage(10, 1)),
    ]

    (row,) = account(jobs, DayRange.single(DAY))

    assert row.counts == UsageCounts(
        requests=4,
        input_tokens=50,
        output_tokens=3,
        total_tokens=53,
        requests_without_usage=2,
    )


def test_the_reported_total_is_summed_as_reported() -> None:
    reasoning = TokenUsage(input_tokens=10, output_tokens=5, total_tokens=40)

    (row,) = account([finished("acme", NOON, reasoning)], DayRange.single(DAY))

    assert (row.counts.input_tokens, row.counts.output_tokens) == (10, 5)
    assert row.counts.total_tokens == 40


def test_a_job_counts_on_the_utc_day_it_finished() -> None:
    last_instant = datetime(2026, 11, 30, 23, 59, 59, 999999, tzinfo=UTC)
    midnight = datetime(2026, 12, 1, tzinfo=UTC)
    # 00:30 in UTC+2 is 22:30 UTC the day before.
    early_east = datetime(2026, 12, 1, 0, 30, tzinfo=timezone(timedelta(hours=2)))
    jobs = [
        finished("acme", last_instant, usage(1, 1)),
        finished("acme", midnight, usage(2, 2)),
        finished("acme", early_east, usage(4, 4)),
    ]

    one_day = counts(account(jobs, DayRange.single(DAY)))
    two_days = counts(account(jobs, DayRange(DAY, date(2026, 12, 1))))

    key = UsageKey(DAY, "acme", "local-analyzer", QUEUE)
    assert one_day == {key: UsageCounts(2, 5, 5, 10, 0)}
    assert two_days[key] == UsageCounts(2, 5, 5, 10, 0)
    assert two_days[UsageKey(date(2026, 12, 1), "acme", "local-analyzer", QUEUE)] == (
        UsageCounts(1, 2, 2, 4, 0)
    )


def test_other_tenants_are_rows_of_their_own_or_left_out_when_one_tenant_is_asked() -> None:
    jobs = [
        finished("acme", NOON, usage(10, 1)),
        finished("globex", NOON, usage(20, 2)),
        finished("globex", NOON, usage(30, 3), model="other-model"),
    ]

    everyone = counts(account(jobs, DayRange.single(DAY)))
    globex = counts(account(jobs, DayRange.single(DAY), tenant="globex"))

    assert sorted((k.tenant, k.model) for k in everyone) == [
        ("acme", "local-analyzer"),
        ("globex", "local-analyzer"),
        ("globex", "other-model"),
    ]
    assert globex == {k: v for k, v in everyone.items() if k.tenant == "globex"}


def test_unfinished_and_failed_jobs_are_not_counted() -> None:
    running = transition(accepted("acme", NOON, "local-analyzer", QUEUE), JobStatus.RUNNING)
    failed = transition(
        accepted("acme", NOON, "local-analyzer", QUEUE), JobStatus.FAILED, lambda: NOON
    )

    assert account([running, failed], DayRange.single(DAY)) == []


def test_a_range_that_ends_before_it_starts_is_refused() -> None:
    with pytest.raises(ValueError, match="ends \\(2026-11-29\\) before it starts"):
        DayRange(DAY, date(2026, 11, 29))


# --- reading the jobs through the document ports -------------------------------------------


@dataclass
class IndexBehind:
    """The tag index as it was when taken: Blob storage updates its index shortly after
    a write, so a query can still name a document deleted or changed since."""

    tags: dict[tuple[str, str], dict[str, str]]

    @classmethod
    def of(cls, documents: InMemoryDocuments) -> IndexBehind:
        return cls({key: dict(tags) for key, tags in documents.blobs.tags.items()})

    def find_tagged(self, container: str, query: TagQuery) -> list[tuple[str, dict[str, str]]]:
        return sorted(
            (name, query.shown(tags))
            for (c, name), tags in self.tags.items()
            if c == container and query.matches(tags)
        )


def stored(jobs: list[Job], clock: ManualClock) -> Wired:
    """The jobs written through the app's job store (with their index tags), each at the
    time it finished; the documents port notes every read (``reads``)."""
    wired = wire(clock=clock, ports={"documents": ReadCounting()})
    store = DocumentJobStore(wired.documents, CONTAINER)
    for job in jobs:
        clock.now = job.completed_at or job.updated_at
        assert store.create(job) is not None
    return wired


def reads(wired: Wired) -> list[str]:
    """The names of the documents read so far, in name order."""
    documents = wired.documents
    assert isinstance(documents, ReadCounting)
    return sorted(documents.read_names)


def reader(wired: Wired, index: TaggedDocuments | None = None, readers: int = 10) -> UsageReader:
    """The report's reader over the wired documents; ``index`` answers the tag queries
    (the documents' own index unless given)."""
    documents = wired.documents
    found_by = JobIndex(index if index is not None else documents, CONTAINER)
    return UsageReader(documents, found_by, CONTAINER, readers=readers)


def name_of(job: Job) -> str:
    return f"{job.tenant_id}/{job.id}.json"


def test_the_report_reads_only_the_jobs_the_index_names_and_names_strays() -> None:
    clock = ManualClock(NOON)
    yesterday = NOON - timedelta(days=1)
    queued, batched = (
        finished("acme", NOON, usage(10, 1)),
        finished("acme", NOON, usage(20, 2), mode=BATCH),
    )
    earlier = finished("acme", yesterday, usage(1000, 1000))
    running = accepted("acme", NOON, "local-analyzer", QUEUE)
    failed = transition(
        accepted("acme", NOON, "local-analyzer", QUEUE), JobStatus.FAILED, lambda: NOON
    )
    wired = stored([queued, batched, earlier, running, failed], clock)
    documents = wired.documents
    # Documents that are no jobs but carry the tags of an acme job that ended on DAY.
    ended_today = index_tags(finished("acme", NOON, None))
    assert documents.create(
        CONTAINER, "acme/not-a-job.json", {"schema": "inferbus.idempotency/v1"}, ended_today
    )
    assert documents.create(
        CONTAINER, "acme/broken.json", {"schema": "inferbus.job/v1", "id": 1}, ended_today
    )
    documents.blobs.write(CONTAINER, "acme/garbage.json", b"\xff{", "application/json", {})
    documents.blobs.tags[(CONTAINER, "acme/garbage.json")] = dict(ended_today)  # the index names it
    assert documents.create(CONTAINER, "stray.json", {"hello": "world"}, ended_today)
    # A job that ended on DAY, written without tags: the index does not name it.
    untagged = finished("acme", NOON, usage(7, 7))
    documents.put(CONTAINER, name_of(untagged), untagged.model_dump(mode="json", by_alias=True))

    report = reader(wired).report(DayRange.single(DAY))

    assert counts(report.rows) == {
        UsageKey(DAY, "acme", "local-analyzer", QUEUE): UsageCounts(1, 10, 1, 11, 0),
        UsageKey(DAY, "acme", "local-analyzer", BATCH): UsageCounts(1, 20, 2, 22, 0),
    }
    assert report.totals == UsageCounts(2, 30, 3, 33, 0)
    tally = report.documents
    assert (tally.listed, tally.read) == (7, 6)
    assert (tally.unfinished, tally.ended_without_result) == (0, 1)
    # Only what the index named was read: not yesterday's job, not the running one, not
    # the untagged one, and not the stray whose name is no job's.
    assert reads(wired) == sorted(
        [
            name_of(queued),
            name_of(batched),
            name_of(failed),
            "acme/not-a-job.json",
            "acme/broken.json",
            "acme/garbage.json",
        ]
    )
    reasons = {item.name: item.reason for item in tally.not_jobs}
    assert reasons["stray.json"] == "not named <tenant>/<id>.json"
    assert reasons["acme/not-a-job.json"].startswith("schema 'inferbus.idempotency/v1'")
    assert reasons["acme/broken.json"].startswith("not a valid job: id:")
    assert reasons["acme/garbage.json"] == "not JSON"
    assert len(reasons) == 4


def test_jobs_that_ended_on_other_days_are_not_read_at_all() -> None:
    clock = ManualClock(NOON)
    jobs = [
        finished("acme", NOON - timedelta(days=2), usage(1, 1)),
        finished("acme", NOON - timedelta(days=1), usage(2, 2)),
        finished("acme", NOON + timedelta(days=1), usage(4, 4)),
    ]
    wired = stored(jobs, clock)

    report = reader(wired).report(DayRange.single(DAY))
    between = reader(wired).report(DayRange(date(2026, 11, 29), DAY))

    assert report.rows == []
    assert (report.documents.listed, report.documents.read) == (0, 0)
    assert between.totals == UsageCounts(1, 2, 2, 4, 0)
    assert (between.documents.listed, between.documents.read) == (1, 1)
    assert reads(wired) == [name_of(jobs[1])]


def test_a_job_is_found_on_the_utc_day_it_finished_whenever_it_was_written() -> None:
    clock = ManualClock(NOON)
    last_instant = datetime(2026, 11, 29, 23, 59, 59, 999999, tzinfo=UTC)
    # 00:30 in UTC+2 is 22:30 UTC on DAY.
    early_east = datetime(2026, 12, 1, 0, 30, tzinfo=timezone(timedelta(hours=2)))
    day_before, on_the_day = (
        finished("acme", last_instant, usage(1, 1)),
        finished("acme", early_east, usage(2, 2)),
    )
    wired = wire(clock=clock, ports={"documents": ReadCounting()})
    store = DocumentJobStore(wired.documents, CONTAINER)
    clock.now = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)  # both written a day late
    assert store.create(day_before) is not None
    assert store.create(on_the_day) is not None

    report = reader(wired).report(DayRange.single(DAY))
    before = reader(wired).report(DayRange.single(date(2026, 11, 29)))

    assert counts(report.rows) == {
        UsageKey(DAY, "acme", "local-analyzer", QUEUE): UsageCounts(1, 2, 2, 4, 0)
    }
    assert counts(before.rows) == {
        UsageKey(date(2026, 11, 29), "acme", "local-analyzer", QUEUE): UsageCounts(1, 1, 1, 2, 0)
    }
    assert (report.documents.listed, before.documents.listed) == (1, 1)


def test_a_job_that_vanished_after_the_index_named_it_is_named_and_the_rest_counted() -> None:
    clock = ManualClock(NOON)
    kept, deleted = finished("acme", NOON, usage(5, 5)), finished("acme", NOON, usage(7, 7))
    wired = stored([kept, deleted], clock)
    behind = IndexBehind.of(wired.documents)
    wired.documents.delete(CONTAINER, name_of(deleted))

    report = reader(wired, behind).report(DayRange.single(DAY))

    assert report.totals == UsageCounts(1, 5, 5, 10, 0)
    assert report.documents.vanished == [name_of(deleted)]
    assert (report.documents.listed, report.documents.read) == (2, 1)


def test_a_job_reopened_after_the_index_named_it_is_unfinished_and_not_counted() -> None:
    clock = ManualClock(NOON)
    done = finished("acme", NOON, usage(5, 5))
    failed = transition(
        accepted("acme", NOON, "local-analyzer", QUEUE), JobStatus.FAILED, lambda: NOON
    )
    wired = stored([done, failed], clock)
    behind = IndexBehind.of(wired.documents)
    jobs = JobRepository(DocumentJobStore(wired.documents, CONTAINER), clock)
    jobs.update("acme", failed.id, lambda job: reopen(job, "replayed by an operator"))

    lagging = reader(wired, behind).report(DayRange.single(DAY))
    current = reader(wired).report(DayRange.single(DAY))

    assert lagging.totals == current.totals == UsageCounts(1, 5, 5, 10, 0)
    assert (lagging.documents.listed, lagging.documents.read) == (2, 2)
    assert (lagging.documents.unfinished, lagging.documents.ended_without_result) == (1, 0)
    assert (current.documents.listed, current.documents.unfinished) == (1, 0)


def test_many_jobs_read_concurrently_sum_to_the_same_totals() -> None:
    clock = ManualClock(NOON)
    jobs = [
        finished(f"t{n % 3}", NOON + timedelta(seconds=n), usage(n, 1), mode=(QUEUE, BATCH)[n % 2])
        for n in range(60)
    ]
    wired = stored(jobs, clock)

    report = reader(wired, readers=16).report(DayRange.single(DAY))

    assert report.totals == UsageCounts(60, sum(range(60)), 60, sum(range(60)) + 60, 0)
    assert len(report.rows) == 6
    assert report.documents.read == 60
    assert reads(wired) == sorted(name_of(job) for job in jobs)


class FailingDocuments:
    """The job documents, with storage down for one of them."""

    def __init__(self, wired: Wired, failing: str) -> None:
        self._documents = wired.documents
        self._failing = failing

    def __getattr__(self, name: str) -> Any:
        return getattr(self._documents, name)

    def find_tagged(self, container: str, query: TagQuery) -> list[tuple[str, dict[str, str]]]:
        return self._documents.find_tagged(container, query)

    def load(self, container: str, name: str) -> tuple[Document, str] | None:
        if name == self._failing:
            raise TransientError(f"reading {container}/{name}: ServiceRequestError")
        return self._documents.load(container, name)


def test_a_storage_outage_stops_the_report_instead_of_giving_a_partial_sum(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = ManualClock(NOON)
    jobs = [finished("acme", NOON, usage(1, 1)) for _ in range(5)]
    wired = stored(jobs, clock)
    failing = FailingDocuments(wired, name_of(jobs[2]))
    services = wire(clock=clock, ports={"documents": failing}).services

    code = main(["usage", "--from-jobs", "--json"], lambda: services)

    assert code == 3
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"unavailable: reading jobs/{name_of(jobs[2])}" in captured.err


# --- the ops command ------------------------------------------------------------------------


def run(wired: Wired, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["usage", "--from-jobs", *argv], lambda: wired.services)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_command_prints_today_by_default_as_a_table_with_totals(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = ManualClock(NOON)
    wired = stored(
        [
            finished("acme", NOON, usage(1200, 34)),
            finished("globex", NOON, None, mode=BATCH),
            finished("acme", NOON - timedelta(days=1), usage(9, 9)),
        ],
        clock,
    )
    clock.now = NOON + timedelta(hours=1)

    code, out, err = run(wired, capsys)

    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "token usage 2026-11-30 (UTC), all tenants"
    assert lines[1].split() == "day tenant model mode requests input output total no usage".split()
    assert lines[2].split() == "2026-11-30 acme local-analyzer queue 1 1,200 34 1,234 0".split()
    assert lines[3].split() == "2026-11-30 globex local-analyzer batch 1 0 0 0 1".split()
    assert lines[2].index("queue") == lines[1].index(" mode ") + 1  # aligned columns
    assert len({len(line) for line in lines[1:]}) == 1  # the counts are right-aligned
    assert lines[4].split() == ["total", "2", "1,200", "34", "1,234", "1"]
    assert len(lines) == 5
    assert (
        "read 2 of 2 job documents the index names as ended in the range; "
        "0 unfinished again, 0 ended without a result"
    ) in err
    assert len(reads(wired)) == 2


def test_the_command_prints_json_for_a_range_and_one_tenant(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = ManualClock(NOON)
    wired = stored(
        [
            finished("acme", NOON - timedelta(days=1), usage(3, 4)),
            finished("acme", NOON, usage(5, 6), mode=BATCH),
            finished("globex", NOON, usage(100, 100)),
        ],
        clock,
    )

    code, out, _ = run(
        wired,
        capsys,
        "--since",
        "2026-11-29",
        "--until",
        "2026-11-30",
        "--tenant",
        "acme",
        "--json",
    )

    assert code == 0
    document = json.loads(out)
    assert (document["since"], document["until"], document["tenant"]) == (
        "2026-11-29",
        "2026-11-30",
        "acme",
    )
    assert document["rows"] == [
        {
            "day": "2026-11-29",
            "tenant": "acme",
            "model": "local-analyzer",
            "mode": "queue",
            "requests": 1,
            "input_tokens": 3,
            "output_tokens": 4,
            "total_tokens": 7,
            "requests_without_usage": 0,
        },
        {
            "day": "2026-11-30",
            "tenant": "acme",
            "model": "local-analyzer",
            "mode": "batch",
            "requests": 1,
            "input_tokens": 5,
            "output_tokens": 6,
            "total_tokens": 11,
            "requests_without_usage": 0,
        },
    ]
    assert document["totals"]["total_tokens"] == 18
    assert document["documents"]["listed"] == 2
    assert len(reads(wired)) == 2


def test_since_alone_runs_to_today(capsys: pytest.CaptureFixture[str]) -> None:
    wired = wire(clock=ManualClock(NOON))

    code, out, _ = run(wired, capsys, "--since", "2026-11-28", "--json")

    assert code == 0
    assert json.loads(out)["until"] == "2026-11-30"


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--day", "2026-11-30", "--since", "2026-11-01"], "--day cannot be combined"),
        (["--until", "2026-11-30"], "--until needs --since"),
        (["--since", "2026-12-02", "--until", "2026-12-01"], "ends (2026-12-01) before it starts"),
    ],
)
def test_contradictory_dates_exit_2_with_the_reason(
    capsys: pytest.CaptureFixture[str], argv: list[str], reason: str
) -> None:
    code, out, err = run(wire(clock=ManualClock(NOON)), capsys, *argv)

    assert (code, out) == (2, "")
    assert reason in err


@pytest.mark.parametrize(
    ("argv", "reason"),
    [
        (["--day", "2026-13-01"], "'2026-13-01' is not a date: month must be in 1..12"),
        (["--day", "20261130"], "'20261130' is not a date in the form YYYY-MM-DD"),
        (["--since", "yesterday"], "'yesterday' is not a date in the form YYYY-MM-DD"),
        (["--tenant", "acme/other"], "'acme/other' is not a tenant id"),
    ],
)
def test_malformed_arguments_exit_2_with_the_reason(
    capsys: pytest.CaptureFixture[str], argv: list[str], reason: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["usage", "--from-jobs", *argv], lambda: wire().services)

    assert exit_.value.code == 2
    assert reason in capsys.readouterr().err


def test_a_long_read_tells_its_progress_on_stderr_and_keeps_stdout_for_the_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = ManualClock(NOON)
    wired = stored([finished(f"t{n % 3}", NOON, usage(1, 1)) for n in range(1001)], clock)

    code, out, err = run(wired, capsys, "--json")

    assert code == 0
    assert json.loads(out)["totals"]["requests"] == 1001  # stdout is the JSON, nothing else
    progress = [line for line in err.splitlines() if line.startswith("usage: read")]
    assert progress == [
        "usage: read 1,000 of 1,001 job documents",
        "usage: read 1,001 of 1,001 job documents",
    ]


def test_a_long_read_keeps_the_table_alone_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    clock = ManualClock(NOON)
    wired = stored([finished("acme", NOON, usage(1, 1)) for _ in range(1000)], clock)

    code, out, err = run(wired, capsys)

    assert code == 0
    assert out.splitlines()[-1].split() == ["total", "1,000", "1,000", "1,000", "2,000", "0"]
    assert "usage: read" not in out
    assert err.count("usage: read 1,000 of 1,000 job documents") == 1


def test_a_short_read_tells_no_progress(capsys: pytest.CaptureFixture[str]) -> None:
    clock = ManualClock(NOON)
    wired = stored([finished("acme", NOON, usage(1, 1)) for _ in range(3)], clock)

    code, _, err = run(wired, capsys)

    assert code == 0
    assert "usage: read" not in err
