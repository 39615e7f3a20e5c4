"""The one exception tree of Inferbus.

Every failure the application knows about is one of a few kinds, and the kind decides
what happens next, whatever the transport::

    InferbusError                      raised on purpose; ``code`` names it in answers
    ├── ConfigurationError             the deployment must change (app settings)
    │   ├── CatalogError               models.json breaks a rule (file, entry, field)
    │   │   └── TenantCatalogError     tenants.json breaks a rule (file, tenant, field)
    │   ├── ProviderRefusal            a provider cannot serve a catalog entry (field)
    │   └── AssetsMissing              the API page's vendored files were not built
    ├── TransientError                 try again later (503 + Retry-After, a retry copy)
    │   ├── InvalidModelOutput         the answer broke the task's schema: ask again
    │   ├── Throttled                  the model service's quota (429), with its wait
    │   ├── CapacityExhausted          no room in the deployment's budget within the wait
    │   ├── ServiceUnavailable         storage or Service Bus down, backlog over its limit
    │   ├── BrokerUnreachable          the namespace itself cannot be reached
    │   ├── ConcurrencyConflict        an ETag race lost: reread and write again
    │   ├── PlatformUnavailable        storage or the broker failed (an outage)
    │   └── ResultNotAnnounced         the result is stored; announcing it failed
    ├── PermanentError                 retrying cannot help (dead-letter, record it)
    │   ├── ClaimCheckInvalid          the input blob is gone or not what was recorded
    │   ├── PrerequisiteFailed         ``after`` names a request that ended without result
    │   └── OrderedWaitRefused         a session's step cannot be deferred
    ├── PolicyRefusal                  the model declined the content: a result
    ├── InvalidInput                   the caller sent something wrong (4xx), ``fields``
    │   ├── InvalidJson                not JSON, too deep or too large (bounded_json)
    │   ├── InvalidContinuation        a listing's token it did not issue
    │   ├── UnknownModel, UnsupportedMode, InvalidParameters
    │   ├── ModelNotAllowed            the tenant may not use the alias (403)
    │   ├── PayloadTooLarge, UnsupportedMediaType
    │   ├── InvalidPayload             a message body that is not a request
    │   ├── UsageError                 a command line that cannot be done (exit code 2)
    │   └── NotOurs                    an event for another container: acknowledged
    ├── Unauthenticated, Forbidden     no identity; an identity without the right
    ├── BudgetExceeded                 the tenant's budget is spent until its period resets
    ├── NotFound                       no such resource for this caller
    │   └── Gone                       retired by the retention policy
    └── Conflict                       the resource's state forbids it (``code``)

Adapters translate SDK exceptions into this tree at the boundary, so that use cases
never see an SDK type; the doors map it to answers (HTTP problem+json, dead-letter
reasons, exit codes). No other module defines an exception class (a test keeps it so).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """One failing field of an input: a dotted location and what is wrong with it."""

    field: str
    message: str


class InferbusError(Exception):
    """Base of every error the application raises on purpose."""

    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConfigurationError(InferbusError):
    """App settings are missing or invalid: the deployment, not the caller, must change."""

    code = "configuration_error"


class CatalogError(ConfigurationError):
    """The model catalog (``models.json``) is unreadable or breaks a rule. The message names
    the file, the alias or task, and the field, so the entry to mend is found at once."""

    code = "invalid_model_catalog"

    def __init__(
        self,
        message: str,
        *,
        file: str = "the model catalog",
        entry: str | None = None,
        field: str | None = None,
    ) -> None:
        where = file
        if entry is not None:
            where += f": {entry}"
        if field is not None:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")
        self.file = file
        self.entry = entry
        self.field = field


class TenantCatalogError(CatalogError):
    """The tenant catalog (``tenants.json``) is unreadable or breaks a rule; ``entry``
    names the tenant (``tenant 'trial'``) and ``field`` what is wrong in it."""

    code = "invalid_tenant_catalog"


class ProviderRefusal(ConfigurationError):
    """A catalog entry its provider cannot serve: ``field`` says which, the message why."""

    code = "provider_refusal"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class AssetsMissing(ConfigurationError):
    """Files the app serves were not built into its package (``make bootstrap`` vendors
    them from npm): ``missing`` names them."""

    code = "assets_missing"

    def __init__(self, where: str, missing: list[str]) -> None:
        super().__init__(f"missing from {where}: {', '.join(missing)}")
        self.missing = missing


class TransientError(InferbusError):
    """A dependency is unavailable or throttling: the same work may succeed later."""

    code = "transient"

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class InvalidModelOutput(TransientError):
    """The model answered, but not with what its task's output schema describes. Models are
    stochastic, so the same request is tried again, a few times (``InvalidOutputRetries``);
    then the job fails with this code and the validation message."""

    code = "invalid_model_output"


class Throttled(TransientError):
    """A model service refused a call for its quota (429): the deployment's state, not the
    request's fault. Carries the wait the service asked for and what it says is left."""

    code = "throttled"

    def __init__(
        self,
        message: str,
        retry_after: float | None = None,
        remaining_tokens: int | None = None,
        remaining_requests: int | None = None,
    ) -> None:
        super().__init__(message, retry_after)
        self.remaining_tokens = remaining_tokens
        self.remaining_requests = remaining_requests


class CapacityExhausted(TransientError):
    """A model call found no capacity of its deployment within the time it may wait: its
    message is scheduled again without counting an attempt."""

    code = "capacity_exhausted"


class ServiceUnavailable(TransientError):
    """Inferbus cannot take work now (storage or Service Bus down, backlog over limit)."""

    code = "service_unavailable"


class BrokerUnreachable(TransientError):
    """Service Bus could not be reached at all (connection, communication, timeout): the
    namespace, not one message or entity, is the trouble. Intake's breaker
    (``intake.breaker``) answers the next submissions at once instead of paying the
    SDK's connect retries for each."""


class PlatformUnavailable(TransientError):
    """Storage or the broker failed outside the model call (the job, the input, the
    ledger, storing the result): an outage of the platform, waited out without using the
    request's retry budget, which is for the model's own transient failures. ``cause``
    is the storage or broker error."""

    code = "platform_unavailable"

    def __init__(self, cause: TransientError) -> None:
        super().__init__(str(cause), cause.retry_after)
        self.cause = cause


class ResultNotAnnounced(TransientError):
    """The result is stored in the job; announcing it failed. Tried again by announcing
    the stored result, never by running the model again. ``cause`` is the publisher's
    error."""

    code = "result_not_announced"

    def __init__(self, cause: TransientError) -> None:
        super().__init__(str(cause), cause.retry_after)
        self.cause = cause


class PermanentError(InferbusError):
    """Retrying the same work cannot succeed."""

    code = "permanent"


class ClaimCheckInvalid(PermanentError):
    """The claim-check blob is missing or does not match its recorded SHA-256 or size."""

    code = "claim_check_invalid"


class PrerequisiteFailed(PermanentError):
    """The request named by ``after`` ended without a result: this step can never run."""

    code = "prerequisite_failed"


class OrderedWaitRefused(PermanentError):
    """A request with a ``document_id`` (a session) that must wait (``not_before``,
    ``after``): a session's messages are received by session, not by sequence number, so
    a deferred one could never be swept. Intake refuses such a request; a producer's is
    failed ``invalid_request``."""

    code = "invalid_request"


class PolicyRefusal(InferbusError):
    """The model refused the content (for example a content filter): record it as a result."""

    code = "refused"

    def __init__(self, message: str, category: str | None = None) -> None:
        super().__init__(message)
        self.category = category


class InvalidInput(InferbusError):
    """The input is malformed or breaks a rule; ``fields`` says which parts."""

    code = "invalid_input"

    def __init__(self, message: str, fields: tuple[FieldError, ...] = ()) -> None:
        super().__init__(message)
        self.fields = fields


class InvalidContinuation(InvalidInput):
    """A continuation token this listing did not issue: malformed, or another tenant's or
    another query's."""

    code = "invalid_continuation"


class UnknownModel(InvalidInput):
    """The requested model is not one this deployment serves."""

    code = "unknown_model"


class ModelNotAllowed(InvalidInput):
    """The alias is served here, but the tenant catalog does not let this tenant use it
    (its ``models``). A refusal of the request as sent, like ``UnknownModel``: the event
    doors reject it and nothing is stored; the HTTP API answers 403."""

    code = "model_not_allowed"


class UnsupportedMode(InvalidInput):
    """The request asks for a lane this deployment does not offer for its model (a batch
    request for a model without a Global Batch deployment)."""

    code = "unsupported_mode"


class InvalidParameters(InvalidInput):
    """The request's ``parameters`` break its model's declaration (``model_parameters``)."""

    code = "invalid_parameters"


class PayloadTooLarge(InvalidInput):
    """The input exceeds a configured size limit."""

    code = "payload_too_large"


class UnsupportedMediaType(InvalidInput):
    """The body's content type is not one the API accepts."""

    code = "unsupported_media_type"


class InvalidPayload(InvalidInput):
    """A Service Bus message that cannot be read as a request: dead-lettered
    ``InvalidPayload`` with this description."""

    code = "invalid_payload"


class UsageError(InvalidInput):
    """A command line that asks for something that cannot be done (exit code 2)."""

    code = "usage_error"


class Unauthenticated(InferbusError):
    """No caller identity could be established."""

    code = "unauthenticated"


class Forbidden(InferbusError):
    """The caller presented credentials, and they do not grant this."""

    code = "forbidden"


class NotFound(InferbusError):
    """No such resource for this caller (another tenant's resource is also 'not found')."""

    code = "not_found"


class Gone(NotFound):
    """The resource existed and has been retired by the retention policy."""

    code = "request_retired"


class Conflict(InferbusError):
    """The request conflicts with the resource's current state.

    ``retry_after`` is set when waiting can resolve the conflict (a job still running).
    """

    code = "conflict"

    def __init__(self, message: str, code: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after


class BudgetExceeded(InferbusError):
    """The tenant's budget (``budget``: tokens_per_day, tokens_per_month or cost_per_month)
    is spent for ``period`` (a UTC day or month), counting what this request is expected
    to cost. Nothing was stored: the HTTP API answers 429 with ``Retry-After`` until the
    period resets; an asynchronous door records the request as ``rejected``."""

    code = "budget_exceeded"

    def __init__(
        self, message: str, *, budget: str, period: str, limit: float, spent: float,
        resets_at: str, retry_after: float,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.budget = budget
        self.period = period
        self.limit = limit
        self.spent = spent
        self.resets_at = resets_at
        self.retry_after = retry_after


class ConcurrencyConflict(TransientError):
    """A compare-and-swap write lost a race (ETag mismatch); reread and try again."""

    code = "concurrency_conflict"


class NotOurs(InvalidInput):
    """An event that is not ours to process (another container, another account):
    acknowledged, never retried. Caught before ``InvalidInput``, which is refused."""

    code = "not_ours"
