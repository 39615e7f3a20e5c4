"""The rules every request obeys, whichever door it came through.

The HTTP API, the event doors and producers that send straight to the queues all meet
these same checks: the doors through ``Intake`` before anything is written, a direct
producer's message in the processor when it records the message's job (the first time
the app sees it). A request that breaks a rule is refused at the door (problem+json) or
dead-lettered with a description that names the rule (the queue door), never run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from pydantic import TypeAdapter, ValidationError

from shared.accounting.tenants import TenantCatalog
from shared.contracts import (
    TENANT_ID_PATTERN,
    ClaimCheck,
    MetadataKey,
    MetadataValue,
    Priority,
    ProcessingMode,
    RequestMessage,
)
from shared.errors import (
    FieldError,
    InvalidInput,
    InvalidParameters,
    ModelNotAllowed,
    PayloadTooLarge,
    UnknownModel,
    UnsupportedMode,
)
from shared.inference import reads_as_text
from shared.inference.catalog import ModelCatalog
from shared.inference.faults import SIMULATE, read_faults
from shared.inference.parameters import GENERATION_PARAMETERS, check_size
from shared.intake.claim_checks import ClaimChecks
from shared.settings import Settings

MAX_METADATA = 16

# The largest message a Standard Service Bus namespace takes (Premium takes more, but the
# app is built for the smallest tier). Everything but parameters and metadata is bounded
# (ids, a claim-check reference of at most 2 KB, application properties), and this much
# is kept for it and the AMQP header.
MAX_REQUEST_MESSAGE_BYTES = 256 * 1024
FIXED_MESSAGE_BYTES = 16_384


_METADATA = TypeAdapter(dict[MetadataKey, MetadataValue])

PRODUCER_TENANTS_SETTING = "ProducerTenants"


class TenantNotAllowed(InvalidInput):
    """A direct producer named a tenant that ``ProducerTenants`` does not list: sending
    rights on a queue never choose the tenant work runs as. The queue door dead-letters
    such a message ``TenantNotAllowed`` (not ``InvalidPayload``: the message is well
    formed, and an operator fixes it by listing the tenant, not by fixing the sender)."""

    code = "tenant_not_allowed"


@dataclass(frozen=True)
class RequestRules:
    """The intake policy: the catalog's aliases (their parameters and lanes), the aliases
    each tenant may use (the tenant catalog) and the app settings DefaultDeadlineSeconds,
    MaxDeadlineSeconds, LocalModelFaults, MaxInlineTextBytes, ProducerTenants and
    GlobalBatch__routePriorities."""

    catalog: ModelCatalog
    default_deadline_seconds: int
    max_deadline_seconds: int
    # parameters.simulate asks for a model fault: only where the development stack
    # enables it (LocalModelFaults); anywhere else such a request is invalid.
    simulated_faults: bool = False
    max_inline_text_bytes: int = 262_144
    # The tenants a direct producer may name; empty: none (denied by default).
    producer_tenants: tuple[str, ...] = ()
    # The Global Batch lane: the priorities sent there when a request names no mode (the
    # aliases it takes are those with a batch deployment).
    batch_priorities: tuple[str, ...] = ()
    # Each tenant's models (``shared.accounting.tenants``); without a file, every alias.
    tenants: TenantCatalog = field(default_factory=TenantCatalog)

    @classmethod
    def from_settings(
        cls, settings: Settings, catalog: ModelCatalog, tenants: TenantCatalog | None = None
    ) -> RequestRules:
        """``tenants``: the tenant catalog the doors enforce (None: every tenant may use
        every alias, for the rules of a message that already passed a door)."""
        return cls(
            catalog=catalog,
            tenants=tenants or TenantCatalog(),
            default_deadline_seconds=settings.limits.default_deadline_seconds,
            max_deadline_seconds=settings.limits.max_deadline_seconds,
            simulated_faults=settings.local_model.faults,
            max_inline_text_bytes=settings.limits.max_inline_text_bytes,
            producer_tenants=settings.tenancy.producer_tenants,
            batch_priorities=settings.global_batch.route_priorities,
        )

    @property
    def aliases(self) -> tuple[str, ...]:
        return self.catalog.aliases

    @property
    def batch_models(self) -> frozenset[str]:
        return frozenset(self.catalog.batch_deployments)

    # --- rules of every door ---------------------------------------------------------

    def check_model(self, model: str) -> None:
        if self.catalog.card(model) is None:
            raise UnknownModel(
                f"model '{model}' is not served here; use one of: " + ", ".join(self.aliases),
                (FieldError("model", "unknown model"),),
            )

    def check_tenant_model(self, tenant_id: str, model: str) -> None:
        """ModelNotAllowed when the tenant catalog does not let ``tenant_id`` use
        ``model``. The detail names the tenant and the model, never the aliases the
        tenant may use (another caller of the same tenant may read it)."""
        if not self.tenants.policy(tenant_id).may_use(model):
            raise ModelNotAllowed(
                f"tenant '{tenant_id}' may not use model '{model}' on this service",
                (FieldError("model", "not allowed for this tenant"),),
            )

    def check_parameters(self, parameters: Mapping[str, Any], model: str) -> dict[str, Any]:
        """The parameters as the request message carries them, checked against the
        declaration of ``model`` (the catalog's, else the generation parameters): at most
        MAX_PARAMETERS entries and MAX_PARAMETERS_BYTES (413 beyond), ``simulate`` only
        where fault injection is enabled, every field within its declared bounds (422)."""
        check_size(parameters)
        given = dict(parameters)
        simulate = given.pop(SIMULATE, None)
        if SIMULATE in parameters and not self.simulated_faults:
            raise InvalidParameters(
                "parameters.simulate (model fault injection) is not enabled on this service",
                (FieldError("parameters.simulate", "fault injection is not enabled"),),
            )
        card = self.catalog.card(model)
        declaration = card.parameters if card is not None else GENERATION_PARAMETERS
        checked = declaration.check(given, model)
        if SIMULATE in parameters:
            checked[SIMULATE] = read_faults(simulate).model_dump(mode="json", exclude_unset=True)
        return checked

    def mode_for(
        self,
        requested: ProcessingMode | None,
        model: str,
        priority: Priority,
        ordered: bool,
    ) -> ProcessingMode:
        """The lane a request runs in: the one it asks for, else the batch lane for the
        priorities the deployment routes there (when its model has a batch deployment
        and it is not part of an order), else the queue lane. ``ordered``: it names a
        document or a prerequisite, which a batch file, answered in any order, cannot
        keep."""
        if requested is None:
            routed = str(priority) in self.batch_priorities and model in self.batch_models
            return ProcessingMode.BATCH if routed and not ordered else ProcessingMode.QUEUE
        if requested is ProcessingMode.BATCH:
            if model not in self.batch_models:
                raise UnsupportedMode(
                    f"model '{model}' has no Global Batch deployment here; "
                    "send it with mode 'queue'",
                    (FieldError("mode", "no batch deployment for this model"),),
                )
            if ordered:
                raise InvalidInput(
                    "a batch-mode request is answered in no particular order; "
                    "it cannot also set document_id or after",
                    (FieldError("mode", "not allowed with document_id or after"),),
                )
        return requested

    @staticmethod
    def check_batch_media_type(media_type: str) -> None:
        """The batch lane sends documents to a chat model as text."""
        if not reads_as_text(media_type):
            raise UnsupportedMode(
                f"the Global Batch lane reads text only, not {media_type}; "
                "send it with mode 'queue'",
                (FieldError("mode", "batch mode needs a text document"),),
            )

    @staticmethod
    def check_message_size(parameters: Mapping[str, Any], metadata: Mapping[str, str]) -> None:
        """PayloadTooLarge (413) for work whose request message the broker would refuse,
        checked before anything is stored: the input itself always goes in a claim check, so
        only parameters and metadata can make a message too large."""
        variable = json.dumps(
            {"parameters": dict(parameters), "metadata": dict(metadata)},
            ensure_ascii=False,
            default=str,
        ).encode("utf-8", "surrogatepass")
        size = len(variable) + FIXED_MESSAGE_BYTES
        if size > MAX_REQUEST_MESSAGE_BYTES:
            raise PayloadTooLarge(
                f"the request message would be about {size} bytes; a queue message is at most "
                f"{MAX_REQUEST_MESSAGE_BYTES}: send less in parameters and metadata",
                (FieldError("parameters", "too large"),),
            )

    def deadline_seconds(self, requested: int | None) -> int:
        """The deadline a request gets: its own, within the maximum, or the default."""
        seconds = requested or self.default_deadline_seconds
        if seconds > self.max_deadline_seconds:
            raise InvalidInput(
                f"deadline_seconds must be at most {self.max_deadline_seconds}",
                (FieldError("deadline_seconds", "too large"),),
            )
        return seconds

    def deadline_for(self, requested: int | None, mode: ProcessingMode) -> int | None:
        """``deadline_seconds``, except that a batch request naming none gets none: the
        Global Batch lane's window is its limit."""
        if mode is ProcessingMode.BATCH and requested is None:
            return None
        return self.deadline_seconds(requested)

    @staticmethod
    def check_timing(not_before: datetime | None, deadline: datetime) -> None:
        if not_before is not None and not_before >= deadline:
            raise InvalidInput(
                "not_before must be earlier than the deadline",
                (FieldError("not_before", "not before the deadline"),),
            )

    @staticmethod
    def check_ordering(
        document_id: str | None, not_before: datetime | None, after: str | None
    ) -> None:
        """A document's steps run in the order they were sent (the ordered lane): a step
        cannot also wait for a time or another request, which would hold up the others."""
        if document_id and (not_before is not None or after):
            field = "not_before" if not_before is not None else "after"
            raise InvalidInput(
                f"a request with a document_id runs in its document's order; "
                f"it cannot also set {field}",
                (FieldError(field, "not allowed with document_id"),),
            )

    # --- the queue door --------------------------------------------------------------

    def check_message(
        self,
        request: RequestMessage,
        received_at: datetime,
        claim_checks: ClaimChecks,
        *,
        tenant_vouched: bool = False,
    ) -> None:
        """Everything the doors check, for a message a producer sent straight to a queue.

        Its deadline, when it names one, must lie within MaxDeadlineSeconds of when the
        broker took the message; its job gets DefaultDeadlineSeconds otherwise.
        ``tenant_vouched``: a door of the app already authenticated the tenant (its input
        is the claim check that door stored), so ProducerTenants does not apply.
        """
        if not TENANT_ID_PATTERN.fullmatch(request.tenant_id):
            raise InvalidInput(
                f"tenant_id {request.tenant_id!r} is not a valid tenant id",
                (FieldError("tenant_id", "invalid"),),
            )
        if not tenant_vouched:
            self.check_producer_tenant(request.tenant_id)
        self.check_model(request.model)
        self.check_tenant_model(request.tenant_id, request.model)
        self.check_parameters(request.parameters, request.model)
        self._check_metadata(request.metadata)
        if isinstance(request.input, ClaimCheck):
            claim_checks.locate(request.input.blob_uri, request.tenant_id)
        else:
            size = len(request.input.text.encode("utf-8"))
            if not size or size > self.max_inline_text_bytes:
                raise PayloadTooLarge(
                    f"input.text is {size} bytes; it must be 1 to "
                    f"{self.max_inline_text_bytes} bytes (larger inputs go in a claim check)",
                    (FieldError("input.text", "empty or too large"),),
                )
        deadline = self.message_deadline(request, received_at)
        latest = received_at + timedelta(seconds=self.max_deadline_seconds)
        if deadline > latest:
            raise InvalidInput(
                f"deadline must be at most {self.max_deadline_seconds} s after the message "
                "was sent",
                (FieldError("deadline", "too late"),),
            )
        self.check_ordering(request.document_id, request.not_before, request.after)
        self.check_timing(request.not_before, deadline)
        ordered = bool(request.document_id or request.after)
        self.mode_for(request.mode, request.model, request.priority, ordered)

    def check_producer_tenant(self, tenant_id: str) -> None:
        """TenantNotAllowed unless ``tenant_id`` is listed in ProducerTenants (an empty
        list allows no tenant). The description names the tenant and the setting, never
        the tenants that are listed."""
        if tenant_id in self.producer_tenants:
            return
        listed = (
            f"it lists {len(self.producer_tenants)} other tenant(s)"
            if self.producer_tenants
            else "it is empty, so no tenant may be named"
        )
        raise TenantNotAllowed(
            f"tenant '{tenant_id}' may not be named by producers sending straight to the "
            f"queues: it is not listed in the app setting {PRODUCER_TENANTS_SETTING} ({listed})",
            (FieldError("tenant_id", f"not listed in {PRODUCER_TENANTS_SETTING}"),),
        )

    def message_deadline(self, request: RequestMessage, received_at: datetime) -> datetime:
        """A message's deadline: its own, or DefaultDeadlineSeconds after it was sent."""
        return request.deadline or received_at + timedelta(seconds=self.default_deadline_seconds)

    def job_deadline(self, request: RequestMessage, received_at: datetime) -> datetime | None:
        """The deadline of a job recorded from its message: ``message_deadline``, except
        that a batch request naming none gets none (as ``deadline_for`` at intake)."""
        if request.mode is ProcessingMode.BATCH and request.deadline is None:
            return None
        return self.message_deadline(request, received_at)

    @staticmethod
    def _check_metadata(metadata: Mapping[str, str]) -> None:
        if len(metadata) > MAX_METADATA:
            raise InvalidInput(
                f"metadata may have at most {MAX_METADATA} entries",
                (FieldError("metadata", "too many entries"),),
            )
        try:
            _METADATA.validate_python(dict(metadata))
        except ValidationError as error:
            fields = tuple(
                FieldError(".".join(("metadata", *map(str, item["loc"]))), item["msg"])
                for item in error.errors()
            )
            raise InvalidInput(
                "metadata keys must be 1-64 of A-Z a-z 0-9 _ . - and values at most 256 characters",
                fields,
            ) from error
