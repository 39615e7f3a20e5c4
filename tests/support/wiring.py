"""The app wired over the in-memory ports (``port_sets.in_memory_ports``), for unit tests.

``wire()`` builds real use cases over ``shared.adapters.in_memory``; ``Wired`` names the
in-memory ports by their concrete types so tests can read what was sent, stored and
published, or make a port fail. ``tenant_catalog`` writes a tenant catalog file and names
it in the app setting the app reads it by, so the wiring reads it as the app does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from shared.accounting.tenants import TenantCatalog
from shared.adapters.in_memory import (
    InMemoryBlobs,
    InMemoryDocuments,
    RecordingPublisher,
    RecordingSender,
)
from shared.clock import Clock
from shared.entrypoints.bootstrap import Services, build_services
from shared.entrypoints.builders import HttpEndpoints
from shared.entrypoints.http.messages import ApiRequest, ApiResponse, guarded
from shared.entrypoints.port_sets import Ports, in_memory_ports
from shared.events.announcements import FAILED
from shared.messaging import OutgoingMessage
from shared.processing.inbound import InboundMessage
from shared.settings import Settings

BASE_URL = "http://localhost:7071/api"
DEFAULT_SETTINGS = {
    "AllowTenantHeader": "true",
    "AllowedModels": "local-analyzer,other-model",
    "MaxQueueBacklog": "0",
    "MaxInlineTextBytes": "1024",
    "MaxUploadBytes": "4096",
}


@dataclass(frozen=True)
class Wired:
    settings: Settings
    ports: Ports
    services: Services

    @property
    def blobs(self) -> InMemoryBlobs:
        return cast(InMemoryBlobs, self.ports.blobs)

    @property
    def documents(self) -> InMemoryDocuments:
        return cast(InMemoryDocuments, self.ports.documents)

    @property
    def queue(self) -> RecordingSender:
        """The request queue: what intake sent (and retries scheduled)."""
        return cast(RecordingSender, self.ports.requests)

    @property
    def published(self) -> RecordingPublisher:
        return cast(RecordingPublisher, self.ports.events)

    @property
    def failures_published(self) -> list[str]:
        """The error codes of the InferenceFailed events published, in order."""
        return [e.data["error_code"] for e in self.published.published if e.type == FAILED]

    @property
    def tenants(self) -> TenantCatalog:
        """The tenant catalog intake enforces."""
        return self.services.http.requests.intake.rules.tenants

    @property
    def http(self) -> HttpEndpoints:
        """The HTTP handlers' endpoints, as the triggers serve them."""
        return self.services.http

    def call(
        self, handler: Callable[[ApiRequest], ApiResponse], request: ApiRequest
    ) -> ApiResponse:
        """Run an API handler as the HTTP trigger does: errors become problem+json."""
        return guarded(handler, request)

    def deliver(self, message: OutgoingMessage, sequence: int = 1) -> InboundMessage:
        """The message as the broker would deliver it to the processor."""
        return delivered(message, sequence)


def delivered(message: OutgoingMessage, sequence: int = 1) -> InboundMessage:
    """``message`` as the broker would deliver it to the processor (first delivery)."""
    return InboundMessage(
        body=message.body,
        message_id=message.message_id,
        sequence_number=sequence,
        delivery_count=1,
        enqueued_time=datetime.now(UTC),
        correlation_id=message.correlation_id,
        content_type=message.content_type,
        subject=message.subject,
        application_properties=dict(message.application_properties),
    )


def wire(
    clock: Clock | None = None,
    ports: dict[str, Any] | None = None,
    *,
    settings: Mapping[str, str] | None = None,
    **overrides: str,
) -> Wired:
    """The use cases over in-memory ports; ``settings`` (a mapping, for names such as
    ``AzureOpenAI__endpoint``) and then ``overrides`` (keywords) are app settings, ``ports``
    replace in-memory ports by name (``Ports`` fields)."""
    values = {**(settings or {}), **overrides}
    defaults = dict(DEFAULT_SETTINGS)
    if "ModelCatalog" in values:  # a catalog instead of the shorthand
        del defaults["AllowedModels"]
    chosen_settings = Settings.model_validate({**defaults, **values})
    base = (
        in_memory_ports(chosen_settings)
        if clock is None
        else in_memory_ports(chosen_settings, clock=clock)
    )
    chosen = replace(base, **(ports or {}))
    return Wired(chosen_settings, chosen, build_services(chosen_settings, chosen))


def tenant_catalog(directory: Path, document: Mapping[str, Any]) -> dict[str, str]:
    """The app setting naming a tenant catalog file of ``document``, written in
    ``directory``: ``wire(settings=tenant_catalog(tmp_path, {...}))``."""
    path = directory / "tenants.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return {"TenantCatalog": str(path)}


def api_request(
    method: str,
    path: str,
    *,
    body: bytes | dict[str, Any] | list[Any] | None = None,
    headers: dict[str, str] | None = None,
    params: dict[str, str] | None = None,
    route_params: dict[str, str] | None = None,
    tenant: str | None = None,
) -> ApiRequest:
    """An ``ApiRequest`` as ``triggers/http_adapter.py`` makes it (header names lower case)."""
    all_headers, raw = request_content(tenant, body, headers)
    return ApiRequest(
        method=method,
        url=f"{BASE_URL}{path}",
        headers=all_headers,
        params=params or {},
        route_params=route_params or {},
        body=raw,
    )


def request_content(
    tenant: str | None,
    body: bytes | dict[str, Any] | list[Any] | None,
    headers: dict[str, str] | None,
) -> tuple[dict[str, str], bytes]:
    """(headers, body) of a test request: the tenant header, JSON bodies with their type."""
    all_headers = {"x-tenant-id": tenant} if tenant else {}
    if isinstance(body, dict | list):
        body = json.dumps(body).encode()
        all_headers["content-type"] = "application/json"
    all_headers.update({k.lower(): v for k, v in (headers or {}).items()})
    return all_headers, body or b""
