"""The emulated resource: files and batch jobs behind one lock, and the steps between states.

What the HTTP API calls for the SDK's ``files.*`` and ``batches.*``, and for the control
endpoints tests use (advance, expire, quota, stats, reset). The enqueued-token quota is
the deployment's, as in Azure: a limit per deployment (``body.model`` of the lines), or
the default one for deployments not named. It is checked when a batch leaves
``validating``: its tokens plus those of the same deployment's batches in ``in_progress``
or ``finalizing`` and of its valid ones still ``validating`` that were created before it
must not pass the deployment's limit (a file larger than the limit alone never passes).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from .errors import bad_request, conflict, not_found
from .files import UPLOAD_PURPOSES, FileStore, check_expiry_seconds
from .input_file import CHAT_URLS, read_input
from .jobs import ACTIVE, FORWARD, TERMINAL, BatchJob, quota_error
from .listing import cursor_page

MAX_METADATA = (16, 64, 512)  # pairs, key length, value length


@dataclass(frozen=True)
class Limits:
    max_lines: int = 100_000
    max_bytes: int = 200 * 1024 * 1024
    enqueued_token_limit: int | None = None  # every deployment's, unless named below
    deployment_token_limits: tuple[tuple[str, int], ...] = ()  # (deployment, limit)


def _metadata(value: Any) -> dict[str, str] | None:
    pairs, key_length, value_length = MAX_METADATA
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > pairs:
        raise bad_request(f"'metadata' must be an object of at most {pairs} pairs.")
    for key, item in value.items():
        if len(key) > key_length or not isinstance(item, str) or len(item) > value_length:
            raise bad_request(
                f"'metadata' keys are strings of at most {key_length} characters "
                f"and values strings of at most {value_length}; {key!r} is not."
            )
    return dict(value)


def _output_expiry(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("anchor") != "created_at":
        raise bad_request(
            '\'output_expires_after\' must be {"seconds": N, "anchor": "created_at"}.',
            "invalid_expires_after",
        )
    return check_expiry_seconds(value.get("seconds"), "output_expires_after")


class BatchService:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.lock = threading.RLock()
        self.reset()

    def reset(self) -> None:
        """Forget every file and batch; the quota goes back to the configured one."""
        with self.lock:
            self.files = FileStore()
            self.batches: dict[str, BatchJob] = {}
            self.token_limit = self.limits.enqueued_token_limit
            self.deployment_limits: dict[str, int | None] = dict(
                self.limits.deployment_token_limits
            )
            self.files_uploaded = 0
            self.batches_created = 0

    # files ---------------------------------------------------------------------------
    def upload(
        self, filename: str, purpose: str, data: bytes, expiry: int | None
    ) -> dict[str, Any]:
        if purpose not in UPLOAD_PURPOSES:
            raise bad_request(
                f"'purpose' must be one of {sorted(UPLOAD_PURPOSES)}, got {purpose!r}."
            )
        with self.lock:
            self.files_uploaded += 1
            return self.files.add(filename, purpose, data, expiry).to_json()

    # batches -------------------------------------------------------------------------
    def create(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request("The request body must be a JSON object.")
        window = body.get("completion_window")
        if window != "24h":
            raise bad_request(f"'completion_window' must be '24h', got {window!r}.")
        endpoint = body.get("endpoint")
        if endpoint not in CHAT_URLS:
            raise bad_request(
                f"'endpoint' must be '/chat/completions', got {endpoint!r}.", "invalid_endpoint"
            )
        metadata = _metadata(body.get("metadata"))
        expiry = _output_expiry(body.get("output_expires_after"))
        file_id = body.get("input_file_id")
        with self.lock:
            stored = self.files.files.get(file_id) if isinstance(file_id, str) else None
            if stored is None:
                raise bad_request(
                    f"The input file {file_id!r} does not exist.", "invalid_input_file"
                )
            if stored.purpose != "batch":
                raise bad_request(
                    f"The input file {file_id!r} has purpose {stored.purpose!r}, not 'batch'.",
                    "invalid_input_file",
                )
            self.batches_created += 1
            job = BatchJob(
                id=f"batch_{secrets.token_hex(16)}",
                sequence=self.batches_created,
                endpoint=endpoint,
                input_file_id=stored.id,
                metadata=metadata,
                output_expiry=expiry,
                plan=read_input(stored.data, self.limits.max_lines, self.limits.max_bytes),
                lines=sum(1 for line in stored.data.split(b"\n") if line.strip()),
            )
            self.batches[job.id] = job
            return job.to_json()

    def job(self, batch_id: str) -> BatchJob:
        found = self.batches.get(batch_id)
        if found is None:
            raise not_found(f"Batch '{batch_id}' not found.", "batchNotFound")
        return found

    def retrieve(self, batch_id: str) -> dict[str, Any]:
        with self.lock:
            return self.job(batch_id).to_json()

    def page(self, after: str | None, limit: int) -> dict[str, Any]:
        with self.lock:
            items = [job.to_json() for job in reversed(self.batches.values())]
        return cursor_page(items, after, limit)

    def cancel(self, batch_id: str) -> dict[str, Any]:
        with self.lock:
            job = self.job(batch_id)
            if job.status in ("validating", "in_progress"):
                job.cancel()
            elif job.status not in ("cancelling", "cancelled"):
                raise conflict(f"Cannot cancel a batch with status '{job.status}'.")
            return job.to_json()

    # steps ---------------------------------------------------------------------------
    def limit_of(self, deployment: str) -> int | None:
        """A deployment's enqueued-token limit (None: unlimited)."""
        if deployment in self.deployment_limits:
            return self.deployment_limits[deployment]
        return self.token_limit

    def _validate(self, job: BatchJob) -> None:
        if job.plan.errors:
            job.fail(job.plan.errors)
            return
        deployment = job.plan.model or ""
        limit = self.limit_of(deployment)
        if limit is not None:
            enqueued = sum(
                other.plan.tokens
                for other in self.batches.values()
                if other is not job
                and other.plan.model == deployment
                and other.status in ACTIVE
                and not other.plan.errors
                and (other.status != "validating" or other.sequence < job.sequence)
            )
            if enqueued + job.plan.tokens > limit:
                job.fail([quota_error(limit, deployment)])
                return
        job.start()

    def step(self, job: BatchJob) -> None:
        """One transition of ``job`` (caller holds the lock); terminal jobs stay as they are."""
        if job.status == "validating":
            self._validate(job)
        elif job.status == "in_progress":
            job.finalize()
        elif job.status == "finalizing":
            job.complete(self.files)
        elif job.status == "cancelling":
            job.cancelled(self.files)

    def advance(self, batch_id: str, to: str | None) -> dict[str, Any]:
        """Step until ``to`` (default: one step); stops early where the batch fails."""
        with self.lock:
            job = self.job(batch_id)
            if job.status in TERMINAL:
                raise conflict(f"The batch is already '{job.status}'.")
            path = ("cancelling", "cancelled") if job.status == "cancelling" else FORWARD
            if to is not None and (
                not isinstance(to, str)
                or to not in path
                or path.index(to) <= path.index(job.status)
            ):
                raise bad_request(
                    f"A '{job.status}' batch cannot advance to {to!r}; "
                    f"next states: {list(path[path.index(job.status) + 1 :])}."
                )
            target = to or path[path.index(job.status) + 1]
            while job.status != target and job.status not in TERMINAL:
                self.step(job)
            return job.to_json()

    def expire(self, batch_id: str, completed_lines: Any) -> dict[str, Any]:
        with self.lock:
            job = self.job(batch_id)
            if job.status not in ACTIVE:
                raise conflict(
                    f"Only a validating, in_progress or finalizing batch can expire, "
                    f"not a '{job.status}' one."
                )
            if job.plan.errors:
                raise conflict("The batch's input file is invalid: it fails validation instead.")
            total = len(job.plan.requests)
            if (
                isinstance(completed_lines, bool)
                or not isinstance(completed_lines, int)
                or not 0 <= completed_lines <= total
            ):
                raise bad_request(f"'completed_lines' must be an integer in 0..{total}.")
            job.expire(self.files, completed_lines)
            return job.to_json()

    def tick(self, interval: float) -> None:
        """Auto-advance: every job not terminal moves once ``interval`` s after its last move."""
        now = time.monotonic()
        with self.lock:
            for job in list(self.batches.values()):
                if job.status not in TERMINAL and now - job.last_step >= interval:
                    self.step(job)
                    job.last_step = now

    # control -------------------------------------------------------------------------
    def set_quota(self, limit: Any, deployment: Any = None) -> dict[str, Any]:
        """The default limit, or ``deployment``'s own (null: that deployment unlimited)."""
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise bad_request("'enqueued_token_limit' must be a non-negative integer or null.")
        if deployment is not None and (not isinstance(deployment, str) or not deployment):
            raise bad_request("'deployment' must be a deployment name (a non-empty string).")
        with self.lock:
            if deployment is None:
                self.token_limit = limit
                return {"enqueued_token_limit": limit}
            self.deployment_limits[deployment] = limit
            return {"deployment": deployment, "enqueued_token_limit": limit}

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "files_uploaded": self.files_uploaded,
                "batches_created": self.batches_created,
                "enqueued_token_limit": self.token_limit,
                "enqueued_token_limits": dict(self.deployment_limits),
                "batches": {
                    job.id: {
                        "status": job.status,
                        "input_file_id": job.input_file_id,
                        "lines": job.lines,
                        "tokens": job.plan.tokens,
                        "deployment": job.plan.model,
                    }
                    for job in self.batches.values()
                },
            }
