"""The Global Batch lane under test: the app's services on Azurite with the local Azure
OpenAI batch emulator, the request queue and the event channels recorded in memory, and
ports that crash the process at a chosen point.

A crash is a ``Crash`` (a BaseException, so nothing in the app catches it, as nothing
catches a killed process): it is raised right after the real call it follows has done
its work, which is the moment a crash leaves the service and our records disagreeing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from openai_emulator.process import OpenAIEmulator
from shared import telemetry
from shared.adapters.in_memory import RecordingPublisher, RecordingSender, RecordingSettler
from shared.clock import Clock
from shared.contracts import Job, JobStatus
from shared.documents import Document, JsonDocuments, Tags
from shared.entrypoints.bootstrap import Services, build_services, use_services
from shared.entrypoints.builders import global_batch_policy
from shared.entrypoints.port_sets import replaced
from shared.events.announcements import COMPLETED, FAILED, Announcer
from shared.global_batch.conclusion import Conclusion, ConclusionPolicy
from shared.global_batch.control_plane import ControlPolicy, GlobalBatchControlPlane, RunReport
from shared.global_batch.ports import BatchService, RemoteBatch
from shared.lanes import Lane
from shared.processing.endings import JobEndings
from shared.processing.values import Outcome
from shared.settings import Settings
from tests.support.wiring import delivered

DEPLOYMENT = "gpt-4o-mini-batch"


def batch_settings(emulator: OpenAIEmulator, **overrides: str) -> dict[str, str]:
    """App settings with the batch lane on against ``emulator``, every wait at zero."""
    return {
        "GlobalBatch__deployments": f"local-analyzer={DEPLOYMENT}",
        "GlobalBatch__endpoint": emulator.endpoint,
        "GlobalBatch__apiKey": emulator.api_key,
        "GlobalBatch__submitAfterSeconds": "0",
        "GlobalBatch__pollSeconds": "0",
        "GlobalBatch__quotaRetrySeconds": "0.2",
        "GlobalBatch__quotaRetryMaxSeconds": "0.4",
        "MaxInlineTextBytes": "65536",
        **overrides,
    }


def submit_batch(call: Callable[..., Any], text: str, **fields: Any) -> str:
    """A batch-mode request through the registered HTTP function; its id."""
    body = {"model": "local-analyzer", "input": {"text": text}, "mode": "batch", **fields}
    response = call("submit_request", "POST", "/v1/requests", body=body)
    assert response.status_code == 202, response.get_body()
    return str(json.loads(response.get_body())["id"])


class Crash(BaseException):
    """The process died here."""


@dataclass
class CrashingService:
    """``BatchService`` that dies once, right after the named call succeeded."""

    real: BatchService
    after: str
    crashed: bool = False

    def _then(self, call: str, value: Any) -> Any:
        if call == self.after and not self.crashed:
            self.crashed = True
            raise Crash(f"after {call}")
        return value

    def find_file(self, filename: str, since: datetime) -> str | None:
        return self.real.find_file(filename, since)

    def upload(self, filename: str, content: bytes, expiry_seconds: int) -> str:
        uploaded = self.real.upload(filename, content, expiry_seconds)
        return self._then("upload", uploaded)  # type: ignore[no-any-return]

    def file_status(self, file_id: str) -> str:
        return self.real.file_status(file_id)

    def find_batch(
        self, input_file_id: str, excluding: frozenset[str], since: datetime
    ) -> RemoteBatch | None:
        return self.real.find_batch(input_file_id, excluding, since)

    def create_batch(
        self, input_file_id: str, output_expiry_seconds: int, metadata: dict[str, str]
    ) -> RemoteBatch:
        created = self.real.create_batch(input_file_id, output_expiry_seconds, metadata)
        return self._then("create_batch", created)  # type: ignore[no-any-return]

    def get_batch(self, batch_id: str) -> RemoteBatch:
        return self._then("get_batch", self.real.get_batch(batch_id))  # type: ignore[no-any-return]

    def cancel_batch(self, batch_id: str) -> RemoteBatch:
        return self.real.cancel_batch(batch_id)

    def download(self, file_id: str) -> bytes:
        return self._then("download", self.real.download(file_id))  # type: ignore[no-any-return]

    def delete_file(self, file_id: str) -> None:
        self.real.delete_file(file_id)


@dataclass
class CrashingDocuments:
    """``JsonDocuments`` (with the listing) that dies once, right after a submission was
    saved in the named state (``opened``: right after a new one was marked open;
    ``restaged``: right after a staged line was written again, for a resubmission)."""

    real: Any
    after_state: str
    crashed: bool = False

    def replace(
        self, container: str, name: str, document: Document, etag: str, tags: Tags | None = None
    ) -> str:
        etag = str(self.real.replace(container, name, document, etag, tags))
        saved = name.startswith("submissions/") and document.get("state") == self.after_state
        if saved and not self.crashed:
            self.crashed = True
            raise Crash(f"after saving a submission {self.after_state}")
        return etag

    def create(
        self, container: str, name: str, document: Document, tags: Tags | None = None
    ) -> str | None:
        return self.real.create(container, name, document, tags)  # type: ignore[no-any-return]

    def load(self, container: str, name: str) -> tuple[Document, str] | None:
        return self.real.load(container, name)  # type: ignore[no-any-return]

    def put(self, container: str, name: str, document: Document) -> str:
        etag = str(self.real.put(container, name, document))
        point = {"open/": "opened", "pending/": "restaged"}.get(name[: name.find("/") + 1])
        if point == self.after_state and not self.crashed:
            self.crashed = True
            raise Crash(f"after the put of {name}")
        return etag

    def delete(self, container: str, name: str, etag: str | None = None) -> None:
        self.real.delete(container, name, etag)

    def list_names(self, container: str, prefix: str) -> list[str]:
        return self.real.list_names(container, prefix)  # type: ignore[no-any-return]

    def list_modified(self, container: str, prefix: str) -> list[tuple[str, datetime]]:
        return self.real.list_modified(container, prefix)  # type: ignore[no-any-return]


@dataclass
class CrashingPublisher:
    """``EventPublisher`` that dies once, right after its ``after``-th publication."""

    real: RecordingPublisher
    after: int
    calls: int = 0

    def publish(self, events: list[Any]) -> None:
        self.real.publish(events)
        self.calls += 1
        if self.calls == self.after:
            raise Crash(f"after publication {self.calls}")


@dataclass
class BatchLane:
    """The app's services with the batch lane on, and what they sent and published."""

    services: Services
    emulator: OpenAIEmulator
    queue: RecordingSender
    events: RecordingPublisher
    delivered_count: int = 0
    settled: list[tuple[str, str | None, str | None, str | None]] = field(default_factory=list)

    def process_queue(self) -> list[Outcome]:
        """Deliver every message sent since the last call to the processor; the outcomes."""
        outcomes: list[Outcome] = []
        messages = self.queue.sent[self.delivered_count :]
        self.delivered_count = len(self.queue.sent)
        for message in messages:
            settler = RecordingSettler()
            inbound = delivered(message, sequence=self.delivered_count)
            outcomes.append(self.services.lanes[Lane.STANDARD].processor.process(inbound, settler))
            self.settled.extend(settler.actions)
        return outcomes

    def run(self) -> RunReport:
        assert self.services.global_batch is not None
        return self.services.global_batch.run()

    def with_ports(self, **ports: Any) -> BatchLane:
        """The same lane rebuilt with some ports replaced (as a restarted process over the
        same storage and service), installed for the registered functions."""
        rebuilt = build_services(self.services.settings, replaced(self.services.ports, **ports))
        use_services(rebuilt)
        return replace(self, services=rebuilt)

    def job(self, tenant: str, request_id: str) -> Job:
        return self.services.jobs.get(tenant, request_id)

    def announced(self, tenant: str, event_type: str = COMPLETED) -> list[str]:
        """Request ids of the tenant's events of ``event_type`` published so far (with
        repeats; the shared storage holds other tests' batches, which a run also moves)."""
        return [
            str(e.data["request_id"])
            for e in self.events.published
            if e.type == event_type and e.data["tenant_id"] == tenant
        ]

    def failures(self, tenant: str) -> dict[str, str]:
        return {
            str(e.data["request_id"]): str(e.data.get("error_code"))
            for e in self.events.published
            if e.type == FAILED and e.data["tenant_id"] == tenant
        }

    def drive(
        self,
        tenant: str,
        ids: list[str],
        *,
        advance_to: str = "completed",
        rounds: int = 12,
        between: Callable[[], None] = lambda: None,
    ) -> list[RunReport]:
        """Run the control plane, moving every batch it submitted along on the emulator,
        until the jobs end."""
        reports = []
        for _ in range(rounds):
            reports.append(self.run())
            for batch_id, batch in self.emulator.stats()["batches"].items():
                if batch["status"] == "cancelling":
                    self.emulator.advance(batch_id)  # to cancelled
                elif batch["status"] in ("validating", "in_progress", "finalizing"):
                    self.emulator.advance(batch_id, to=advance_to)
            between()
            if all(self.job(tenant, i).status.is_terminal for i in ids):
                reports.append(self.run())  # closes what just concluded
                return reports
        states = {i: self.job(tenant, i).status.value for i in ids}
        raise AssertionError(f"jobs not terminal after {rounds} runs: {states}")


def submissions_of(services: Services, tenant: str) -> Iterator[Any]:
    """The tenant's submissions (open or closed), from the batch container."""
    records = services.http.batches.records
    assert records is not None
    documents: JsonDocuments = services.ports.documents
    for name in documents.list_names(records.container, "submissions/"):
        loaded = records.submission(name.removeprefix("submissions/").removesuffix(".json"))
        if loaded is not None and loaded[0].tenant_id == tenant:
            yield loaded[0]


def members_of(services: Services, submission_id: str) -> list[str]:
    """A submission's request ids, in the order they were planned."""
    records = services.http.batches.records
    assert records is not None
    return list(records.kept_members(submission_id))


def statuses(lane: BatchLane, tenant: str, ids: list[str]) -> dict[str, JobStatus]:
    return {i: lane.job(tenant, i).status for i in ids}


class BatchEndings:
    """The ``inferbus.batch.ended`` counts the app recorded, read through the OpenTelemetry
    SDK: a meter provider of the test's own (the global one cannot be replaced, and other
    tests install theirs) makes the app's instruments for the test's duration."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[self._reader])
        monkeypatch.setattr(metrics, "get_meter", provider.get_meter)
        monkeypatch.setattr(telemetry, "_instruments", None)

    def counted(self) -> dict[tuple[str, str], int]:
        """(status, deployment) -> batches counted so far."""
        data = self._reader.get_metrics_data()
        counts: dict[tuple[str, str], int] = {}
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name != telemetry.BATCH_ENDED:
                        continue
                    for point in metric.data.data_points:
                        assert isinstance(point, NumberDataPoint), "a counter's points are sums"
                        attributes = point.attributes or {}
                        key = (
                            str(attributes["inferbus.batch.status"]),
                            str(attributes["gen_ai.request.model"]),
                        )
                        counts[key] = counts.get(key, 0) + int(point.value)
        return counts


def control_policy(settings: Settings, **changes: Any) -> ControlPolicy:
    """The control plane's policy as ``composition.global_batch_for`` makes it of
    ``settings``, with ``changes`` (``enqueued_tokens``: the planning's; others: the
    policy's own fields)."""
    policy = global_batch_policy(settings)
    if "enqueued_tokens" in changes:
        planning = replace(policy.planning, enqueued_tokens=changes.pop("enqueued_tokens"))
        policy = replace(policy, planning=planning)
    return replace(policy, **changes)


def with_control_plane(lane: BatchLane, policy: ControlPolicy, clock: Clock) -> BatchLane:
    """``lane`` whose control plane has ``policy`` and runs on ``clock`` (the rest of the
    services as they are)."""
    services = lane.services
    assert services.http.batches.records is not None
    assert services.ports.batch_service is not None
    announcer = Announcer(lane.events, None)
    settings = services.settings
    control_plane = GlobalBatchControlPlane(
        records=services.http.batches.records,
        service=services.ports.batch_service,
        jobs=services.jobs,
        conclusion=Conclusion(
            records=services.http.batches.records,
            jobs=services.jobs,
            endings=JobEndings(services.jobs, announcer, clock),
            announcer=announcer,
            requeue=lane.queue,
            policy=ConclusionPolicy(
                failed_lines=settings.global_batch.failed_lines,
                max_resubmissions=settings.global_batch.max_resubmissions,
            ),
            catalog=services.models.catalog,
            clock=clock,
        ),
        policy=policy,
        clock=clock,
    )
    return replace(lane, services=replace(services, global_batch=control_plane))
