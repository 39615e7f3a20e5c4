"""One Settings object for the whole app, built lazily from app settings.

Azure Functions hands app settings to the worker as environment variables; locally the
same names live in ``local.settings.json`` under ``Values``. Field aliases are those app
setting names, so this model, ``local.settings.sample.json`` and the Bicep app settings
speak the same vocabulary (a test keeps the three in agreement). Settings that belong
together are a group, one field of ``Settings`` (``settings.global_batch.deployments``
reads ``GlobalBatch__deployments``): the app settings stay flat, and ``Settings`` takes
them flat, by name, and hands each group its own.

Connections follow the Functions conventions: a connection named ``Storage`` is either a
connection string in ``Storage`` (local emulators) or identity-based settings under the
``Storage__`` prefix (``Storage__blobServiceUri`` / ``Storage__serviceUri``, optional
``Storage__credential=managedidentity`` and ``Storage__clientId``). The same holds for
``ServiceBusConnection`` with ``ServiceBusConnection__fullyQualifiedNamespace``.

Nothing is read at import time: the Functions host imports every module while indexing,
before the app settings of a slot swap or a test are in place.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    model_validator,
)
from pydantic.fields import FieldInfo

from shared.errors import ConfigurationError


def _split_csv(value: object) -> object:
    """App settings are flat strings: accept ``"a,b, c"`` for list-valued settings."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _parse_bool(value: object) -> object:
    if isinstance(value, str):
        return value.strip().lower() in {"1", "true", "yes", "on"}
    return value


# Where a setting must be present: connection strings only for local emulators, identity
# forms only in Azure, alternatives nowhere in particular. Unmarked settings belong in the
# Function App's Bicep app settings and apply locally too, where their defaults serve:
# local.settings.sample.json holds only what differs from them (and every LOCAL one).
LOCAL: dict[str, Any] = {"where": "local"}
AZURE: dict[str, Any] = {"where": "azure"}
ALTERNATIVE: dict[str, Any] = {"where": "alternative"}

CsvList = Annotated[tuple[str, ...], BeforeValidator(_split_csv)]
Flag = Annotated[bool, BeforeValidator(_parse_bool)]


class SettingsGroup(BaseModel):
    """Settings that belong together, one field of ``Settings``; each field's alias is its
    full app setting name (``GlobalBatch__deployments``), as in the flat app settings."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)


class EventGridPullSettings(SettingsGroup):
    """The pull door (``EventGridPull__*``): a namespace topic's queue event subscription
    (empty endpoint: off)."""

    endpoint: str | None = Field(None, alias="EventGridPull__namespaceEndpoint")
    topic: str = Field("inference-requests", alias="EventGridPull__topicName")
    subscription: str = Field("app-pull", alias="EventGridPull__subscriptionName")
    key: str | None = Field(None, alias="EventGridPull__key", json_schema_extra=LOCAL)
    client_id: str | None = Field(None, alias="EventGridPull__clientId", json_schema_extra=AZURE)
    max_events: int = Field(32, ge=1, le=100, alias="EventGridPull__maxEvents")
    max_wait_seconds: int = Field(10, ge=10, le=120, alias="EventGridPull__maxWaitSeconds")
    drain_seconds: float = Field(50.0, gt=0, le=540, alias="EventGridPull__drainSeconds")
    schedule: str = Field("*/10 * * * * *", alias="EventGridPullSchedule")
    # The alias for pulled InferenceRequested events that name no model (DefaultModel).
    model: str | None = Field(None, alias="EventGridPull__model", json_schema_extra=ALTERNATIVE)


class BackpressureSettings(SettingsGroup):
    """Backpressure per lane: each lane's own queue depth against its own limit (0: no
    limit), so high-priority and ordered work is admitted while the standard queue is full."""

    max_queue_backlog: int = Field(5000, ge=0, alias="MaxQueueBacklog")
    max_priority_queue_backlog: int = Field(1000, ge=0, alias="MaxPriorityQueueBacklog")
    max_ordered_queue_backlog: int = Field(5000, ge=0, alias="MaxOrderedQueueBacklog")
    cache_seconds: float = Field(5.0, ge=0, alias="BacklogCacheSeconds")


class RetrySettings(SettingsGroup):
    """Scheduled retries of transient failures, and of answers that break their schema.

    The defaults guarantee at least 917 s of backoff before a request gives up
    (processing/backoff.py): a ten-minute storage or broker outage does not dead-letter
    healthy work. MaxRetries stays below the request queues' maxDeliveryCount (10): the
    ordered lane retries by redelivery.
    """

    max_retries: int = Field(9, ge=0, le=100, alias="MaxRetries")
    base_seconds: float = Field(5.0, gt=0, alias="RetryBaseSeconds")
    max_seconds: float = Field(600.0, gt=0, alias="RetryMaxSeconds")
    jitter_floor: float = Field(0.5, ge=0, le=1, alias="RetryJitterFloor")
    # An answer that breaks its task's output schema is tried again this many times.
    invalid_output_retries: int = Field(2, ge=0, le=10, alias="InvalidOutputRetries")

    @model_validator(mode="after")
    def _check_backoff(self) -> RetrySettings:
        if self.base_seconds > self.max_seconds:
            raise ValueError("RetryBaseSeconds must not exceed RetryMaxSeconds")
        return self


class JobSettings(SettingsGroup):
    """How long a job lives (``JobRetentionDays``) and the job watchdog (``JobWatchdog*``),
    which ends every accepted request that cannot end by itself."""

    # Days a job (with its result) is kept: the Blob lifecycle rule on JobsContainer
    # (Bicep's jobsRetentionDays) deletes it then, and the status API answers 410 Gone.
    retention_days: int = Field(90, ge=1, alias="JobRetentionDays")
    watchdog_schedule: str = Field("45 */5 * * * *", alias="JobWatchdogSchedule")
    # How long past its deadline a job may still be running before the watchdog ends it
    # (above MaxLockRenewalSeconds, so a model call that holds its lock can still finish).
    watchdog_grace_seconds: float = Field(900.0, ge=0, alias="JobWatchdogGraceSeconds")
    # A job without a deadline that has not changed for this long cannot end by itself
    # any more (the request queues' message time to live is one day).
    watchdog_stale_seconds: float = Field(90_000.0, gt=0, alias="JobWatchdogStaleSeconds")
    # How long one watchdog run may read jobs before it saves its checkpoint and leaves
    # the rest to the next run (well inside the schedule's period and the function timeout).
    watchdog_max_run_seconds: float = Field(240.0, gt=0, alias="JobWatchdogMaxRunSeconds")


class JobResendSettings(SettingsGroup):
    """A job still ``accepted`` (or ``running`` with its lock long gone) this long after
    its last change, with no live message known for it, is sent again from the job record
    (same message id; the processor's dedupe makes a duplicate harmless), at most
    ``JobResend__maxAttempts`` times, before the watchdog ends it."""

    after_seconds: float = Field(1200.0, gt=0, alias="JobResend__afterSeconds")
    max_attempts: int = Field(2, ge=0, le=10, alias="JobResend__maxAttempts")


class ModelCapacitySettings(SettingsGroup):
    """Model capacity (shared/inference/capacity.py): calls within each deployment's tokens
    and requests per minute, 429s pausing the deployment instead of spending retries. Off:
    every call goes out at once and a 429 is a failed attempt (the older behaviour)."""

    enabled: Flag = Field(True, alias="ModelCapacity__enabled")
    # How long a call may wait for its deployment's capacity, holding its message's lock,
    # before the message is scheduled again (without counting an attempt); a call expected
    # to wait longer gives it back at once. Below MaxLockRenewalSeconds.
    wait_seconds: float = Field(60.0, gt=0, le=3600, alias="ModelCapacity__waitSeconds")
    # How often each instance writes its heartbeat with its demand (the quota flows to the
    # instances with work); it also writes at once when its demand starts or stops.
    heartbeat_seconds: float = Field(5.0, gt=0, le=300, alias="ModelCapacity__heartbeatSeconds")
    # The work (in seconds of its share of the deployment) a tenant's messages hold in one
    # instance before its next message goes back to the queue, scheduled for its turn:
    # one tenant's backlog then waits in the broker's schedule, not ahead of everyone
    # else's messages (shared/processing/fair_turns.py). 0: never sent back.
    fair_share_seconds: float = Field(5.0, ge=0, le=300, alias="ModelCapacity__fairShareSeconds")
    # The quota of the aliases of AllowedModels/ModelProvider (a catalog's entries give
    # their own capacity): Bicep sets them from the model deployment's capacity.
    tokens_per_minute: int | None = Field(
        None, ge=0, alias="ModelCapacity__tokensPerMinute", json_schema_extra=ALTERNATIVE
    )
    requests_per_minute: int | None = Field(
        None, ge=0, alias="ModelCapacity__requestsPerMinute", json_schema_extra=ALTERNATIVE
    )


class UsageSettings(SettingsGroup):
    """The tenants' usage ledger and budgets (shared/accounting/spending.py)."""

    # How often each instance writes the answers it counted to the tenants' month
    # documents (one write per tenant and month per flush, not one per request). A budget
    # counts an answer not written yet at its estimate, so this bounds only how late a
    # report sees it, and what an instance stopped without a flush loses of the ledger.
    flush_seconds: float = Field(5.0, gt=0, le=300, alias="Usage__flushSeconds")


class LocalModelSettings(SettingsGroup):
    """The local model's behaviour (``LocalModel*``, shared/adapters/models/local.py)."""

    latency_ms: int = Field(0, ge=0, alias="LocalModelLatencyMs")
    transient_rate: float = Field(0.0, ge=0, le=1, alias="LocalModelTransientRate")
    refusal_terms: CsvList = Field((), alias="LocalModelRefusalTerms")
    # Development stack only: lets a request's parameters.simulate inject model faults
    # before its model runs (tests/e2e needs it; shared/inference/faults.py). Off by default.
    faults: Flag = Field(False, alias="LocalModelFaults")


class AzureOpenAISettings(SettingsGroup):
    """The Azure OpenAI resource of ``azure_openai`` aliases (``AzureOpenAI__*``)."""

    endpoint: str | None = Field(None, alias="AzureOpenAI__endpoint")
    # v1: the v1 API, which current models (gpt-5, o-series) need; or a dated version.
    api_version: str = Field("v1", alias="AzureOpenAI__apiVersion")
    api_key: str | None = Field(None, alias="AzureOpenAI__apiKey", json_schema_extra=ALTERNATIVE)
    client_id: str | None = Field(None, alias="AzureOpenAI__clientId", json_schema_extra=AZURE)
    timeout_seconds: float = Field(120.0, gt=0, alias="AzureOpenAI__timeoutSeconds")


class GlobalBatchSettings(SettingsGroup):
    """The Global Batch lane (``GlobalBatch__*``, shared/global_batch)."""

    # ``alias=deployment`` pairs: a model alias callers name, and the Global Batch
    # deployment that serves it in batch mode. Empty: no batch lane (mode "batch" is 422).
    deployments: CsvList = Field((), alias="GlobalBatch__deployments")
    # The Azure OpenAI resource of those deployments (unset: AzureOpenAI__endpoint).
    endpoint: str | None = Field(None, alias="GlobalBatch__endpoint")
    api_version: str = Field("v1", alias="GlobalBatch__apiVersion")
    api_key: str | None = Field(None, alias="GlobalBatch__apiKey", json_schema_extra=LOCAL)
    client_id: str | None = Field(None, alias="GlobalBatch__clientId", json_schema_extra=AZURE)
    # Requests of these priorities that name no mode go to the batch lane.
    route_priorities: CsvList = Field((), alias="GlobalBatch__routePriorities")
    # The service's limits per input file (100,000 requests, 200 MB): a full file is
    # submitted and the next request starts a new one.
    max_lines_per_file: int = Field(100_000, ge=1, le=100_000, alias="GlobalBatch__maxLinesPerFile")
    max_bytes_per_file: int = Field(
        200_000_000, ge=1_000, le=200_000_000, alias="GlobalBatch__maxBytesPerFile"
    )
    # A tenant's waiting requests for one deployment are submitted once this many wait, or
    # once the oldest has waited this long (large files, as the service recommends).
    submit_at_lines: int = Field(50_000, ge=1, alias="GlobalBatch__submitAtLines")
    submit_after_seconds: float = Field(900.0, ge=0, alias="GlobalBatch__submitAfterSeconds")
    # The service keeps output files 14 to 30 days; the app copies them out at once.
    output_expiry_days: int = Field(14, ge=14, le=30, alias="GlobalBatch__outputExpiryDays")
    # A line the service answered with an error (not a refusal): "queue" sends it through
    # the queue lane, "fail" fails its job with the service's error.
    failed_lines: Literal["queue", "fail"] = Field("queue", alias="GlobalBatch__failedLines")
    # An expired batch's unfinished requests are submitted again this many times.
    max_resubmissions: int = Field(2, ge=0, le=10, alias="GlobalBatch__maxResubmissions")
    # A batch refused for the enqueued-token quota is created again after this wait,
    # doubling up to the maximum.
    quota_retry_seconds: float = Field(300.0, gt=0, alias="GlobalBatch__quotaRetrySeconds")
    quota_retry_max_seconds: float = Field(3600.0, gt=0, alias="GlobalBatch__quotaRetryMaxSeconds")
    # A batch refused for quota is tried again until its members' earliest deadline, and
    # never longer than this; then its members fail ``batch_quota_exceeded``.
    quota_wait_limit_seconds: float = Field(
        86_400.0, gt=0, alias="GlobalBatch__quotaWaitLimitSeconds"
    )
    # The batch deployments' enqueued-token quota (a Global Batch deployment's capacity
    # x 1000). A planned file whose estimate (input/4 + max_tokens a line) exceeds it is
    # split. Unset: files are split by lines and bytes only.
    enqueued_tokens: int | None = Field(
        None, ge=1, alias="GlobalBatch__enqueuedTokens", json_schema_extra=ALTERNATIVE
    )
    # A batch's status is read at most this often (the service asks for once a minute).
    poll_seconds: float = Field(60.0, ge=0, alias="GlobalBatch__pollSeconds")
    timeout_seconds: float = Field(300.0, gt=0, alias="GlobalBatch__timeoutSeconds")
    schedule: str = Field("5 */1 * * * *", alias="GlobalBatchSchedule")
    # One run of the control plane stops starting new work after this long (well inside
    # host.json's functionTimeout of 10 minutes); the next run goes on where it stopped.
    run_seconds: float = Field(240.0, gt=0, le=540, alias="GlobalBatch__runSeconds")

    @model_validator(mode="after")
    def _check_quota_retry(self) -> GlobalBatchSettings:
        if self.quota_retry_seconds > self.quota_retry_max_seconds:
            raise ValueError(
                "GlobalBatch__quotaRetrySeconds must not exceed GlobalBatch__quotaRetryMaxSeconds"
            )
        return self


class WebhookSettings(SettingsGroup):
    """Event Grid webhook deliveries (``Webhook*``, shared/events/webhook_auth.py)."""

    shared_secret: str | None = Field(
        None, alias="WebhookSharedSecret", json_schema_extra=ALTERNATIVE
    )
    token_audience: str | None = Field(
        None, alias="WebhookTokenAudience", json_schema_extra=ALTERNATIVE
    )
    token_issuer: str | None = Field(
        None, alias="WebhookTokenIssuer", json_schema_extra=ALTERNATIVE
    )
    jwks_uri: str | None = Field(None, alias="WebhookJwksUri", json_schema_extra=ALTERNATIVE)
    # Which tenants each webhook credential may submit work for (parsed by
    # shared/events/webhook_tenancy.py, which documents the format).
    tenants: str | None = Field(None, alias="WebhookTenants", json_schema_extra=ALTERNATIVE)
    # The alias for InferenceRequested events pushed to the webhook (and the Event Grid
    # trigger) that name no model (DefaultModel).
    model: str | None = Field(None, alias="WebhookModel", json_schema_extra=ALTERNATIVE)

    @model_validator(mode="after")
    def _check_tokens(self) -> WebhookSettings:
        if bool(self.token_audience) != bool(self.token_issuer):
            raise ValueError("set both WebhookTokenAudience and WebhookTokenIssuer, or neither")
        return self


class StorageSettings(SettingsGroup):
    """The app's data storage account, the connection named ``Storage``: a connection
    string locally, or identity-based ``Storage__*`` settings in Azure."""

    connection_string: str | None = Field(None, alias="Storage", json_schema_extra=LOCAL)
    blob_service_uri: str | None = Field(
        None, alias="Storage__blobServiceUri", json_schema_extra=AZURE
    )
    service_uri: str | None = Field(
        None, alias="Storage__serviceUri", json_schema_extra=ALTERNATIVE
    )
    client_id: str | None = Field(None, alias="Storage__clientId", json_schema_extra=AZURE)

    @property
    def blob_endpoint(self) -> str | None:
        """The identity-based blob endpoint, whichever of the two documented names is set."""
        return self.blob_service_uri or self.service_uri


class ServiceBusSettings(SettingsGroup):
    """Service Bus, the connection named ``ServiceBusConnection`` (connection string
    locally, namespace and identity in Azure), and how intake treats an unreachable broker."""

    connection_string: str | None = Field(
        None, alias="ServiceBusConnection", json_schema_extra=LOCAL
    )
    namespace: str | None = Field(
        None, alias="ServiceBusConnection__fullyQualifiedNamespace", json_schema_extra=AZURE
    )
    client_id: str | None = Field(
        None, alias="ServiceBusConnection__clientId", json_schema_extra=AZURE
    )
    runtime_counts_url: str | None = Field(
        None, alias="ServiceBusRuntimeCountsUrl", json_schema_extra=LOCAL
    )
    # After a send fails because the broker is unreachable, intake answers 503 at once for
    # this long; then one call probes the broker and, if it gets through, closes the
    # breaker (so a broker that is back takes work again within this long).
    breaker_open_seconds: float = Field(0.5, gt=0, le=300, alias="ServiceBusBreaker__openSeconds")


class EventGridTopicSettings(SettingsGroup):
    """Where result CloudEvents go (``EventGridTopic__*``; empty endpoint: nowhere)."""

    endpoint: str | None = Field(None, alias="EventGridTopic__topicEndpoint")
    key: str | None = Field(None, alias="EventGridTopic__topicKey", json_schema_extra=ALTERNATIVE)
    namespace_topic: str | None = Field(
        None, alias="EventGridTopic__namespaceTopic", json_schema_extra=ALTERNATIVE
    )
    client_id: str | None = Field(None, alias="EventGridTopic__clientId", json_schema_extra=AZURE)


class QueueSettings(SettingsGroup):
    """The Service Bus entities by name: the three request lanes and the results topic."""

    requests: str = Field("inference-requests", alias="RequestsQueueName")
    priority: str = Field("inference-priority", alias="PriorityQueueName")
    ordered: str = Field("inference-ordered", alias="OrderedQueueName")
    results_topic: str = Field("inference-results", alias="ResultsTopicName")


class ContainerSettings(SettingsGroup):
    """The blob containers the app uses, and those a ``blob_uri`` may point into."""

    incoming: str = Field("incoming", alias="IncomingContainer")
    inputs: str = Field("inputs", alias="InputsContainer")
    jobs: str = Field("jobs", alias="JobsContainer")
    idempotency: str = Field("idempotency", alias="IdempotencyContainer")
    ledgers: str = Field("ledgers", alias="LedgerContainer")
    # Each tenant's month of spending: the usage ledger and the budgets' counter.
    usage: str = Field("usage", alias="UsageContainer")
    eventgrid_dead_letters: str = Field(
        "eventgrid-deadletters", alias="EventGridDeadLetterContainer"
    )
    # Pending requests, submissions, the tenant ledger and the copied files of the Global
    # Batch lane.
    batches: str = Field("batches", alias="BatchContainer")
    allowed_inputs: CsvList = Field(("incoming", "inputs"), alias="AllowedInputContainers")

    def names(self) -> list[str]:
        """Every blob container the app uses (created by Bicep in Azure, by the local stack
        and the tests locally)."""
        single = {value for _, value in self if isinstance(value, str)}
        return sorted(single | set(self.allowed_inputs))


class LimitSettings(SettingsGroup):
    """What a request may be: its sizes, its media types, its deadline; and the
    ``Retry-After`` callers are told to wait."""

    max_inline_text_bytes: int = Field(262_144, ge=1, alias="MaxInlineTextBytes")
    max_upload_bytes: int = Field(10_485_760, ge=1, alias="MaxUploadBytes")
    allowed_upload_media_types: CsvList = Field(
        (
            "text/plain",
            "text/markdown",
            "text/csv",
            "text/html",
            "application/json",
            "application/pdf",
            "image/*",
        ),
        alias="AllowedUploadMediaTypes",
    )
    default_deadline_seconds: int = Field(3600, ge=1, alias="DefaultDeadlineSeconds")
    max_deadline_seconds: int = Field(86_400, ge=1, alias="MaxDeadlineSeconds")
    status_poll_seconds: int = Field(2, ge=1, alias="StatusPollSeconds")

    @model_validator(mode="after")
    def _check_deadlines(self) -> LimitSettings:
        if self.default_deadline_seconds > self.max_deadline_seconds:
            raise ValueError("DefaultDeadlineSeconds must not exceed MaxDeadlineSeconds")
        return self


class TenancySettings(SettingsGroup):
    """Which tenant work runs as: from a caller's principal, and from a producer that
    sends straight to the queues; and what each tenant may use (the tenant catalog)."""

    # Tenants a producer sending straight to the queues may name. Empty: none, so a
    # direct producer's message is dead-lettered ``TenantNotAllowed`` until its tenant is
    # listed here (sending rights alone never choose the tenant work runs as).
    producer_tenants: CsvList = Field((), alias="ProducerTenants")
    allow_tenant_header: Flag = Field(False, alias="AllowTenantHeader")
    claim_types: CsvList = Field(
        ("tid", "http://schemas.microsoft.com/identity/claims/tenantid"),
        alias="TenantClaimTypes",
    )
    # The tenant catalog: a JSON file of each tenant's weight, budget and models (relative
    # to the app root; shared/accounting/tenants.py). Unset: tenants.json at the app root
    # when there is one, else every tenant weighs 1, with no budget and every model.
    catalog: str | None = Field(None, alias="TenantCatalog", json_schema_extra=ALTERNATIVE)


class ModelSettings(SettingsGroup):
    """The model catalog (shared/inference/catalog.py) and the alias of work that names
    no model."""

    # The model catalog: a JSON file of tasks and model aliases (relative to the app
    # root). Unset: AllowedModels/ModelProvider when either is set (the shorthand of one
    # document-analysis alias per allowed model), else models.json at the app root.
    catalog: str | None = Field(None, alias="ModelCatalog", json_schema_extra=ALTERNATIVE)
    allowed: CsvList = Field(
        ("local-analyzer",), alias="AllowedModels", json_schema_extra=ALTERNATIVE
    )
    provider: str | None = Field(None, alias="ModelProvider", json_schema_extra=ALTERNATIVE)
    # The alias for work that names no model (DefaultModel; unset: the catalog's first),
    # and per door: documents dropped in the incoming container (IncomingBlobModel);
    # the webhook's and the pull door's are WebhookModel and EventGridPull__model.
    default: str | None = Field(None, alias="DefaultModel")
    incoming_blob: str | None = Field(
        None, alias="IncomingBlobModel", json_schema_extra=ALTERNATIVE
    )

    @model_validator(mode="after")
    def _check_models(self) -> ModelSettings:
        if not self.allowed:
            raise ValueError("AllowedModels must name at least one model")
        if self.catalog and self.uses_shorthand:
            raise ValueError(
                "set ModelCatalog or AllowedModels/ModelProvider (the one-provider shorthand), "
                "not both"
            )
        return self

    @property
    def uses_shorthand(self) -> bool:
        """Whether AllowedModels or ModelProvider is set: the one-provider shorthand of
        the model catalog (``shared.inference.catalog``)."""
        return bool({"allowed", "provider"} & self.model_fields_set)


class ProcessingSettings(SettingsGroup):
    """How the lanes process messages: model calls at once, lock renewal, and deferred
    messages the broker cannot find."""

    model_concurrency: int = Field(16, ge=1, le=256, alias="ModelConcurrency")
    # The high-priority lane's own share of model calls, on top of ModelConcurrency: a
    # backlog of standard work never takes the slots high-priority work runs in.
    priority_model_concurrency: int = Field(4, ge=1, le=256, alias="PriorityModelConcurrency")
    lock_renewal_seconds: float = Field(20.0, gt=0, alias="LockRenewalSeconds")
    max_lock_renewal_seconds: float = Field(600.0, gt=0, alias="MaxLockRenewalSeconds")
    # A deferred message the broker cannot find is asked for again this many times, this
    # far apart, before its job is failed ``deferred_message_lost``.
    deferred_missing_retries: int = Field(5, ge=0, le=100, alias="DeferredMissingRetries")
    deferred_missing_retry_seconds: float = Field(60.0, gt=0, alias="DeferredMissingRetrySeconds")


class MaintenanceSettings(SettingsGroup):
    """The timers that keep every accepted request moving: the deferred sweeper, the
    backlog report and the dead-letter reconciler (the job watchdog's are in ``jobs``)."""

    deferred_sweep_schedule: str = Field("0 */1 * * * *", alias="DeferredSweepSchedule")
    backlog_report_schedule: str = Field("30 */1 * * * *", alias="BacklogReportSchedule")
    deadletter_reconcile_schedule: str = Field(
        "15 */1 * * * *", alias="DeadLetterReconcileSchedule"
    )
    # The dead-letter reconciler reads the dead-letter queues this many messages a page,
    # from a checkpoint, instead of peeking all of them every run.
    dead_letter_reconcile_page_size: int = Field(
        100, ge=1, le=1000, alias="DeadLetterReconcilePageSize"
    )


class SiteSettings(SettingsGroup):
    """The app as callers and the Functions platform name it: where callers reach the API
    (result announcements link to it), the audience their Entra tokens name, and this
    instance (its capacity heartbeat). ``WEBSITE_*`` are set by the platform, not by you."""

    # Unset: https:// followed by WEBSITE_HOSTNAME.
    public_base_url: str | None = Field(None, alias="PublicBaseUrl", json_schema_extra=ALTERNATIVE)
    # The audience of the Entra tokens App Service authentication requires on the API
    # (Bicep: the API's client id, or the first of apiAudiences). Set, the OpenAPI document
    # requires such a bearer token beside the function key; unset (locally), it does not.
    api_token_audience: str | None = Field(None, alias="ApiTokenAudience", json_schema_extra=AZURE)
    hostname: str | None = Field(None, alias="WEBSITE_HOSTNAME", json_schema_extra=ALTERNATIVE)
    # This instance, as the platform names it (its capacity heartbeat); else host and pid.
    instance_id: str | None = Field(
        None, alias="WEBSITE_INSTANCE_ID", json_schema_extra=ALTERNATIVE
    )

    @property
    def api_base_url(self) -> str | None:
        """The API's public origin (no trailing slash), or None when it is not known."""
        if self.public_base_url:
            return self.public_base_url.rstrip("/")
        if self.hostname:
            return f"https://{self.hostname}"
        return None


class Settings(BaseModel):
    """Every app setting Inferbus reads; the alias is the app setting name.

    Every setting belongs to a group, one field here, as docs/settings.md has one table
    per group: a reader finds a setting under its page section, and code can be handed the
    one group it needs. ``Settings`` itself keeps only the groups, the checks that span
    groups (waits below the lock renewal bound) and what combines them (the Global Batch
    lane's deployments and its endpoint, which falls back on the Azure OpenAI resource).
    """

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    # --- connections -------------------------------------------------------------------
    storage: StorageSettings = Field(default_factory=StorageSettings)
    servicebus: ServiceBusSettings = Field(default_factory=ServiceBusSettings)
    eventgrid_topic: EventGridTopicSettings = Field(default_factory=EventGridTopicSettings)
    eventgrid_pull: EventGridPullSettings = Field(default_factory=EventGridPullSettings)

    # --- entities and containers -------------------------------------------------------
    queues: QueueSettings = Field(default_factory=QueueSettings)
    containers: ContainerSettings = Field(default_factory=ContainerSettings)

    # --- intake policy -----------------------------------------------------------------
    limits: LimitSettings = Field(default_factory=LimitSettings)
    tenancy: TenancySettings = Field(default_factory=TenancySettings)
    site: SiteSettings = Field(default_factory=SiteSettings)
    backpressure: BackpressureSettings = Field(default_factory=BackpressureSettings)

    # --- processing ----------------------------------------------------------------------
    processing: ProcessingSettings = Field(default_factory=ProcessingSettings)
    retries: RetrySettings = Field(default_factory=RetrySettings)
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings)
    jobs: JobSettings = Field(default_factory=JobSettings)
    job_resend: JobResendSettings = Field(default_factory=JobResendSettings)

    # --- models (shared/inference/catalog.py) -------------------------------------------
    models: ModelSettings = Field(default_factory=ModelSettings)
    model_capacity: ModelCapacitySettings = Field(default_factory=ModelCapacitySettings)
    usage: UsageSettings = Field(default_factory=UsageSettings)
    local_model: LocalModelSettings = Field(default_factory=LocalModelSettings)
    azure_openai: AzureOpenAISettings = Field(default_factory=AzureOpenAISettings)

    # --- the Global Batch lane (shared/global_batch) ------------------------------------
    global_batch: GlobalBatchSettings = Field(default_factory=GlobalBatchSettings)

    # --- Event Grid webhook deliveries -------------------------------------------------
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)

    # Every app setting given, by name, known here or not: %Name% references of the model
    # catalog resolve from them, as binding expressions do from the app settings.
    _app_settings: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_app_settings(
        cls, values: Any, handler: ModelWrapValidatorHandler[Settings]
    ) -> Settings:
        settings = handler(values)
        if isinstance(values, Mapping):
            settings._app_settings = {
                str(name): str(value)
                for name, value in values.items()
                if isinstance(value, str | int | float | bool)
            }
        return settings

    def app_setting(self, name: str) -> str | None:
        """The app setting ``name`` as given (None when unset or empty)."""
        value = self._app_settings.get(name, "").strip()
        return value or None

    @model_validator(mode="before")
    @classmethod
    def _from_flat_app_settings(cls, values: Any) -> Any:
        """App settings come flat, by name (the environment, local.settings.json Values):
        one that is present but empty is treated as not set (its default), and each
        setting of a group goes to that group (``GlobalBatch__deployments`` to
        ``global_batch``)."""
        if not isinstance(values, dict):
            return values
        given = {k: v for k, v in values.items() if not (isinstance(v, str) and v.strip() == "")}
        group_of = _group_of_setting()
        grouped: dict[str, dict[str, Any]] = {}
        for name in [name for name in given if name in group_of]:
            grouped.setdefault(group_of[name], {})[name] = given.pop(name)
        for group in set(group_of.values()):
            # A group may also be given whole (a model or a mapping); an app setting that
            # only shares a group's name (a string) is not one of the model's.
            whole = given.get(group)
            if isinstance(whole, SettingsGroup):
                whole = whole.model_dump()
            if isinstance(whole, str):
                del given[group]
                whole = None
            if group in grouped:
                given[group] = {**(whole or {}), **grouped[group]}
        return given

    @model_validator(mode="after")
    def _check_consistency(self) -> Settings:
        # Within one group, the group checks its own settings (LimitSettings, ModelSettings,
        # RetrySettings, GlobalBatchSettings, WebhookSettings).
        lock_bound = self.processing.max_lock_renewal_seconds
        if self.model_capacity.wait_seconds >= lock_bound:
            raise ValueError("ModelCapacity__waitSeconds must be below MaxLockRenewalSeconds")
        if self.jobs.watchdog_grace_seconds < lock_bound:
            raise ValueError("JobWatchdogGraceSeconds must not be below MaxLockRenewalSeconds")
        if self.batch_deployments and not self.batch_endpoint:
            raise ValueError("GlobalBatch__deployments needs GlobalBatch__endpoint")
        return self

    @property
    def batch_deployments(self) -> dict[str, str]:
        """Model alias -> Global Batch deployment (``GlobalBatch__deployments``)."""
        pairs: dict[str, str] = {}
        for pair in self.global_batch.deployments:
            alias, separator, deployment = pair.partition("=")
            if not separator or not alias.strip() or not deployment.strip():
                raise ValueError(f"GlobalBatch__deployments: {pair!r} is not alias=deployment")
            pairs[alias.strip()] = deployment.strip()
        return pairs

    @property
    def batch_endpoint(self) -> str | None:
        """The Azure OpenAI resource the batch lane submits to."""
        return self.global_batch.endpoint or self.azure_openai.endpoint


class SettingField(NamedTuple):
    """One app setting of the model: a field of ``Settings`` or of one of its groups."""

    name: str  # the app setting name: the field's alias
    group: str | None  # the field of Settings that holds its group; None: Settings itself
    attribute: str  # the field's name in its group (or in Settings)
    info: FieldInfo

    @property
    def where(self) -> str:
        """Where it must be configured: "local", "azure", "alternative" or "both"."""
        extra = self.info.json_schema_extra
        where = extra.get("where", "both") if isinstance(extra, dict) else "both"
        return str(where)


def _group_model(info: FieldInfo) -> type[SettingsGroup] | None:
    annotation = info.annotation
    if isinstance(annotation, type) and issubclass(annotation, SettingsGroup):
        return annotation
    return None


@cache
def setting_fields() -> tuple[SettingField, ...]:
    """Every app setting of the model, the fields of each group in its group's place."""
    fields: list[SettingField] = []
    for name, info in Settings.model_fields.items():
        group = _group_model(info)
        if group is None:
            fields.append(SettingField(info.alias or name, None, name, info))
            continue
        fields += [
            SettingField(inner.alias or attribute, name, attribute, inner)
            for attribute, inner in group.model_fields.items()
        ]
    return tuple(fields)


@cache
def _group_of_setting() -> dict[str, str]:
    """App setting name -> the field of Settings that holds its group."""
    return {field.name: field.group for field in setting_fields() if field.group}


def setting_value(settings: Settings, name: str) -> object:
    """The value of the app setting ``name`` in ``settings``, as the model parsed it."""
    for field in setting_fields():
        if field.name == name:
            holder = settings if field.group is None else getattr(settings, field.group)
            return getattr(holder, field.attribute)
    raise KeyError(name)


def setting_names() -> list[str]:
    """Every app setting name this model reads."""
    return [field.name for field in setting_fields()]


def setting_names_for(place: str) -> list[str]:
    """The settings that apply in ``place`` ("local" or "azure"): the unmarked ones and
    those marked for ``place``.

    Used by the tests that keep local.settings.sample.json and the Bicep app settings in
    agreement with this model (in Azure each is set; locally a default may serve).
    """
    return [field.name for field in setting_fields() if field.where in ("both", place)]


def read_local_settings(path: Path) -> dict[str, str]:
    """The ``Values`` of a ``local.settings.json`` file, or nothing when it is absent."""
    if not path.is_file():
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ConfigurationError(f"{path} is not valid JSON: {error}") from error
    values = document.get("Values", {}) if isinstance(document, dict) else {}
    return {str(key): str(value) for key, value in values.items()}


def load_settings(
    environ: Mapping[str, str] | None = None, local_settings: Path | None = None
) -> Settings:
    """Build Settings from the environment over ``local.settings.json`` Values.

    Environment variables win, as they do under the Functions host. Invalid values raise
    ConfigurationError naming every offending setting.
    """
    environ = os.environ if environ is None else environ
    path = local_settings or Path(environ.get("INFERBUS_LOCAL_SETTINGS", "local.settings.json"))
    values: dict[str, Any] = dict(read_local_settings(path))
    values.update(environ)  # every name: the catalog's %Name% may reference any setting
    try:
        return Settings.model_validate(values)
    except ValueError as error:
        raise ConfigurationError(f"invalid app settings: {error}") from error


@cache
def get_settings() -> Settings:
    """The process-wide Settings, built on first use."""
    return load_settings()


def reset_settings() -> None:
    """Forget the cached Settings (tests and tools that change the environment)."""
    get_settings.cache_clear()
