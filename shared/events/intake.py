"""Intake for work that arrives as events: Blob-created and ``InferenceRequested``.

Every door (blob trigger, Event Grid trigger, webhook, dead-letter replay) ends in
``Intake.submit`` like the HTTP API, so the same validation and durability rules hold.
Deliveries are at-least-once, so each submission carries a durable dedupe key:

- a blob is identified by container, name and ETag (the blob trigger and a Blob-created
  webhook delivery of the same upload therefore make one job, not two);
- an application event by its source and id.

Blobs are accepted only from the incoming container and under a tenant prefix
(``<IncomingContainer>/<tenant>/<file>``); anything else (for example the app's own
outputs) is ignored, so nothing the app writes can trigger more work.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass

from shared.blobs import BlobStore
from shared.contracts import (
    TENANT_ID_PATTERN,
    BlobReferenceInput,
    DocumentId,
    Door,
    ModelName,
    Priority,
    RequestedMode,
    TextInput,
)
from shared.errors import FieldError, InvalidInput, NotOurs, PayloadTooLarge
from shared.events.incoming import BLOB_CREATED, INFERENCE_REQUESTED, IncomingEvent
from shared.events.webhook_tenancy import UNRESTRICTED, TenantScope
from shared.intake.claim_checks import ClaimChecks
from shared.intake.submissions import Accepted, BlobReference, InlineContent, Intake, Submission
from shared.redaction import redact_text, redact_url
from shared.tracing import continue_or_start

log = logging.getLogger(__name__)

Status = Literal["accepted", "duplicate", "ignored", "rejected"]


@pydantic_dataclass(frozen=True)
class EventOutcome:
    """What became of one event of a delivery (the webhook answers a list of them)."""

    event_id: str
    event_type: str
    status: Status
    request_id: str | None = None
    reason: str | None = None


class InferenceRequestedData(BaseModel):
    """``data`` of a ``com.inferbus.InferenceRequested`` event (version 1)."""

    model_config = ConfigDict(extra="forbid")

    tenant_id: str = Field(pattern=TENANT_ID_PATTERN.pattern)
    model: ModelName | None = None
    input: TextInput | BlobReferenceInput
    parameters: dict[str, Any] = Field(default_factory=dict)
    priority: Priority = Priority.NORMAL
    not_before: AwareDatetime | None = None
    deadline_seconds: int | None = Field(None, ge=1)
    metadata: dict[str, str] = Field(default_factory=dict, max_length=16)
    document_id: DocumentId | None = None
    mode: RequestedMode | None = None


def dedupe_key(*parts: str) -> str:
    """A fixed-length Idempotency-Key from an identity of arbitrary characters."""
    # surrogatepass: an identity is whatever a publisher sent (the doors refuse lone
    # surrogates, but a key must never be the thing that fails).
    identity = "\x1f".join(parts).encode("utf-8", "surrogatepass")
    return "evt-" + hashlib.sha256(identity).hexdigest()


def check_tenant(tenant_id: str, tenants: TenantScope) -> None:
    """InvalidInput (a rejected event, never a job) for a tenant outside the scope."""
    if not tenants.allows(tenant_id):
        raise InvalidInput(
            f"tenant '{tenant_id}' is not one this webhook credential may submit work for "
            f"(WebhookTenants allows: {tenants.describe()})",
            (FieldError("tenant_id", "not allowed for this webhook credential"),),
        )


def carried_traceparent(event: IncomingEvent) -> str | None:
    """The event's ``traceparent`` extension, when it is a string (anything else is noise)."""
    value = event.extensions.get("traceparent")
    return value if isinstance(value, str) else None


class EventIntake:
    def __init__(
        self,
        *,
        intake: Intake,
        blobs: BlobStore,
        claim_checks: ClaimChecks,
        incoming_container: str,
        default_model: str,
        max_inline_text_bytes: int,
        door_models: Mapping[Door, str] | None = None,
    ) -> None:
        """``default_model``: the alias of work that names none; ``door_models``: the
        alias per door instead (``Door.BLOB`` for documents that land in the incoming
        container, by a blob trigger or a BlobCreated event; else the door an event came
        through)."""
        self._intake = intake
        self._blobs = blobs
        self._claim_checks = claim_checks
        self._incoming = incoming_container
        self._default_model = default_model
        self._door_models = dict(door_models or {})
        self._max_inline_text_bytes = max_inline_text_bytes

    def model_for(self, source: Door) -> str:
        """The alias of work from door ``source`` that names no model."""
        return self._door_models.get(source, self._default_model)

    # --- doors ----------------------------------------------------------------------------

    def accept_event(
        self,
        event: IncomingEvent,
        source: Door = Door.EVENTGRID,
        tenants: TenantScope = UNRESTRICTED,
    ) -> EventOutcome:
        """Turn one event into a job; InvalidInput becomes a ``rejected`` outcome, and so
        does an event for a tenant outside ``tenants`` (the webhook credential's scope)."""
        try:
            if event.type == BLOB_CREATED:
                accepted = self._blob_created(event, source, tenants)
            elif event.type == INFERENCE_REQUESTED:
                accepted = self._inference_requested(event, source, tenants)
            else:
                log.info(
                    "ignored event %s of type %s (subscription filters should drop it)",
                    event.id,
                    event.type,
                )
                return EventOutcome(event.id, event.type, "ignored", reason="unhandled event type")
        except NotOurs as ignored:
            log.info("ignored event %s: %s", event.id, ignored)
            return EventOutcome(event.id, event.type, "ignored", reason=str(ignored))
        except InvalidInput as error:
            log.warning("rejected event %s (%s): %s", event.id, event.type, error)
            return EventOutcome(event.id, event.type, "rejected", reason=str(error))
        status: Status = "duplicate" if accepted.replayed else "accepted"
        return EventOutcome(event.id, event.type, status, request_id=accepted.job.id)

    def accept_blob(
        self,
        container: str,
        name: str,
        *,
        sha256: str | None = None,
        etag: str | None = None,
        source: Door = Door.BLOB,
        traceparent: str | None = None,
        tenants: TenantScope = UNRESTRICTED,
    ) -> Accepted:
        """A document that landed in the incoming container becomes a job (its own claim
        check). Raises InvalidInput when the blob cannot be accepted."""
        if container != self._incoming:
            raise NotOurs(f"{container}/{name} is not in the incoming container")
        info = self._blobs.info(container, name)
        if info is None:
            raise InvalidInput(f"blob {container}/{name} does not exist")
        tenant_id = name.split("/", 1)[0]
        if "/" not in name or not TENANT_ID_PATTERN.fullmatch(tenant_id):
            raise InvalidInput(
                f"blob {name!r} must be named <tenant>/<file> inside '{container}'",
                (FieldError("blob", "no tenant prefix"),),
            )
        check_tenant(tenant_id, tenants)
        declared = info.metadata.get("tenant_id")
        if declared and declared != tenant_id:
            raise InvalidInput(f"blob metadata tenant_id {declared!r} does not match its path")
        version = etag or info.etag or ""
        key = dedupe_key("blob", container, name, version)
        priority = info.metadata.get("priority", Priority.NORMAL.value)
        try:
            priority_value = Priority(priority)
        except ValueError as error:
            raise InvalidInput(
                f"blob metadata priority {priority!r} is not low, normal or high"
            ) from error
        return self._intake.submit(
            Submission(
                tenant_id=tenant_id,
                model=info.metadata.get("model") or self.model_for(Door.BLOB),
                content=BlobReference(self._claim_checks.blob_uri(container, name), sha256),
                priority=priority_value,
                metadata={"blob_name": name[:256]},
                source=source,
                idempotency_key=key,
                request_hash=key,
                trace=continue_or_start(traceparent),
                parent=traceparent,
            )
        )

    # --- event types -----------------------------------------------------------------------

    def _blob_created(self, event: IncomingEvent, source: Door, tenants: TenantScope) -> Accepted:
        data = event.data if isinstance(event.data, dict) else {}
        url = data.get("url")
        if not isinstance(url, str):
            raise InvalidInput("BlobCreated event data has no url")
        try:
            location = self._claim_checks.locate_any(url)
        except InvalidInput as error:
            raise NotOurs(
                f"blob {redact_url(url)} is outside this app's storage ({redact_text(str(error))})"
            ) from error
        return self.accept_blob(
            location.container,
            location.name,
            etag=str(data.get("eTag") or "") or None,
            source=source,
            traceparent=carried_traceparent(event),
            tenants=tenants,
        )

    def _inference_requested(
        self, event: IncomingEvent, source: Door, tenants: TenantScope
    ) -> Accepted:
        try:
            data = InferenceRequestedData.model_validate(event.data)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
            )
            raise InvalidInput(f"InferenceRequested data is invalid: {problems}") from error
        check_tenant(data.tenant_id, tenants)
        content: InlineContent | BlobReference
        if isinstance(data.input, TextInput):
            text = data.input.text.encode("utf-8")
            if len(text) > self._max_inline_text_bytes:
                raise PayloadTooLarge(
                    f"inline text is {len(text)} bytes; the limit is {self._max_inline_text_bytes}"
                )
            content = InlineContent(text, "text/plain; charset=utf-8")
        else:
            content = BlobReference(data.input.blob_uri, data.input.sha256)
        key = dedupe_key("event", event.source, event.id)
        not_before: datetime | None = data.not_before
        mode, batch_when_late = RequestedMode.intake_choice(data.mode)
        return self._intake.submit(
            Submission(
                tenant_id=data.tenant_id,
                model=data.model or self.model_for(source),
                content=content,
                parameters=data.parameters,
                priority=data.priority,
                not_before=not_before,
                deadline_seconds=data.deadline_seconds,
                metadata=data.metadata,
                document_id=data.document_id,
                mode=mode,
                batch_when_late=batch_when_late,
                source=source,
                idempotency_key=key,
                request_hash=key,
                trace=continue_or_start(carried_traceparent(event)),
                parent=carried_traceparent(event),
            )
        )
