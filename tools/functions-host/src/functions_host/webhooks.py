"""The extension webhooks: ``/runtime/webhooks/eventgrid`` and ``/runtime/webhooks/blobs``.

Both answer Event Grid's validation handshakes (Event Grid schema: header
``aeg-event-type: SubscriptionValidation`` -> 200 ``{"validationResponse": code}``;
CloudEvents: ``OPTIONS`` with ``WebHook-Request-Origin`` -> ``WebHook-Allowed-Origin``)
and require the extension's system key (``code=``), as the host does.

Event Grid trigger: each event of the posted array is one invocation, the event's JSON
as the trigger data (the runtime builds the ``EventGridEvent`` or ``CloudEvent``); 200
when every invocation succeeded, 500 otherwise so Event Grid retries. Blob trigger
(``source="EventGrid"``): each ``BlobCreated`` event of a container the trigger's path
names is one invocation, the blob read through the binding's connection and sent as bytes
with the host's trigger metadata (``BlobTrigger``, ``Uri``, ``Properties``, ``Metadata``
and the path's parameters, e.g. ``name``); 202 when done, 500 on failure.
(The real host queues blob work internally and retries it itself; here the failure goes
back to the sender, whose retry schedule then applies.)
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any
from urllib.parse import unquote

from functions_host.functions import FunctionSpec
from functions_host.http_messages import IncomingRequest, OutgoingResponse
from functions_host.invocation import HostStoppingError, Invoker
from functions_host.keys import HostKeys
from functions_host.problems import problem
from functions_host.protos import messages
from functions_host.storage import BlobContent, BlobReader, container_of_path

log = logging.getLogger("host.webhooks")
VALIDATION_EVENT = "Microsoft.EventGrid.SubscriptionValidationEvent"
BLOB_CREATED = "Microsoft.Storage.BlobCreated"


def blob_trigger_metadata(
    spec: FunctionSpec, container: str, blob_name: str, blob: BlobContent
) -> dict[str, Any]:
    """What the host tells a blob trigger besides the content (names as the host uses them)."""
    path = str(spec.trigger.get("path", ""))
    metadata = {
        "BlobTrigger": messages.TypedData(string=f"{container}/{blob_name}"),
        "Uri": messages.TypedData(string=blob.url),
        "Properties": messages.TypedData(json=json.dumps(blob.properties, default=str)),
        "Metadata": messages.TypedData(json=json.dumps(blob.metadata)),
    }
    for name, value in path_parameters(path, blob_name).items():
        metadata[name] = messages.TypedData(string=value)
    return metadata


def path_parameters(path: str, blob_name: str) -> dict[str, str]:
    """Values of a blob path's ``{name}`` parameters (``incoming/{name}`` -> name)."""
    pattern = path.split("/", 1)[1] if "/" in path else ""
    regex = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>.+)", re.escape(pattern))
    match = re.fullmatch(regex, blob_name) if pattern else None
    return dict(match.groupdict()) if match else {}


def _events_of(request: IncomingRequest) -> list[dict[str, Any]] | None:
    try:
        document = json.loads(request.body or b"null")
    except ValueError:
        return None
    if isinstance(document, dict):
        document = [document]
    if not isinstance(document, list) or not all(isinstance(e, dict) for e in document):
        return None
    return document


def _handshake(request: IncomingRequest, events: list[dict[str, Any]]) -> OutgoingResponse | None:
    if (request.header("aeg-event-type") or "").lower() == "subscriptionvalidation" or (
        events and events[0].get("eventType") == VALIDATION_EVENT
    ):
        data = events[0].get("data") if events else None
        code = data.get("validationCode") if isinstance(data, dict) else None
        if not code:
            detail = "validation event without data.validationCode"
            return problem(400, "malformed-request", detail)
        log.info("Event Grid subscription validated (code %s)", code)
        return OutgoingResponse.json(200, {"validationResponse": code})
    return None


class WebhookHandler:
    """Dispatches webhook posts to Event Grid and Event Grid-sourced blob triggers."""

    def __init__(self, functions: list[FunctionSpec], invoker: Invoker, keys: HostKeys) -> None:
        self._event_grid = {
            f.name.lower(): f for f in functions if f.trigger_type == "eventGridTrigger"
        }
        self._blobs = {f.name.lower(): f for f in functions if f.trigger_type == "blobTrigger"}
        self._invoker = invoker
        self._keys = keys
        self._readers: dict[str, BlobReader] = {}

    def handle(self, extension: str, request: IncomingRequest) -> OutgoingResponse:
        system_key = "eventgrid_extension" if extension == "eventgrid" else "blobs_extension"
        presented = request.query_value("code") or request.header("x-functions-key")
        if not self._keys.allows_system(system_key, presented):
            detail = f"this webhook needs the {system_key} system key or the master key (?code=)"
            return problem(401, "unauthorized", detail)
        if request.method.upper() == "OPTIONS":
            origin = request.header("WebHook-Request-Origin") or "*"
            return OutgoingResponse(
                200, [("WebHook-Allowed-Origin", origin), ("WebHook-Allowed-Rate", "*")]
            )
        if request.method.upper() != "POST":
            detail = f"the {extension} webhook takes POST (and OPTIONS for the handshake)"
            return problem(405, "method-not-allowed", detail, [("Allow", "POST, OPTIONS")])
        name = unquote(request.query_value("functionName") or "")
        if extension == "blobs" and name.startswith("Host.Functions."):
            name = name[len("Host.Functions.") :]
        table = self._event_grid if extension == "eventgrid" else self._blobs
        spec = table.get(name.lower())
        if spec is None:
            return problem(404, "not-found", f"no {extension} function named {name!r}")
        events = _events_of(request)
        if events is None:
            return problem(400, "malformed-request", "body must be a JSON array of events")
        handshake = _handshake(request, events)
        if handshake is not None:
            return handshake
        try:
            if extension == "eventgrid":
                return self._deliver_events(spec, events)
            return self._deliver_blobs(spec, events)
        except HostStoppingError:
            return problem(
                503, "host-stopping", "the host is stopping; retry later", [("Retry-After", "10")]
            )

    def _deliver_events(self, spec: FunctionSpec, events: list[dict[str, Any]]) -> OutgoingResponse:
        failed = 0
        for event in events:
            try:
                data = messages.TypedData(json=json.dumps(event))
                self._invoker.invoke(spec, {spec.trigger_parameter: data})
            except HostStoppingError:
                raise
            except Exception:
                failed += 1
        if failed:
            return _deliveries_failed(spec, failed, len(events))
        return OutgoingResponse(200)

    def _reader(self, spec: FunctionSpec) -> BlobReader:
        connection = str(spec.trigger.get("connection") or "AzureWebJobsStorage")
        if connection not in self._readers:
            self._readers[connection] = BlobReader.for_connection(connection)
        return self._readers[connection]

    def _deliver_blobs(self, spec: FunctionSpec, events: list[dict[str, Any]]) -> OutgoingResponse:
        watched = container_of_path(str(spec.trigger.get("path", "")))
        failed = 0
        for event in events:
            kind = event.get("eventType") or event.get("type")
            subject = str(event.get("subject", ""))
            parts = subject.split("/blobs/", 1)
            container = parts[0].rsplit("/", 1)[-1] if len(parts) == 2 else ""
            if kind != BLOB_CREATED or container != watched:
                log.info(
                    "blobs webhook: ignoring %s for %s (function %s)", kind, subject, spec.name
                )
                continue
            blob_name = parts[1]
            blob = self._reader(spec).read(container, blob_name)
            if blob is None:
                log.warning("blob %s/%s is gone; %s not invoked", container, blob_name, spec.name)
                continue
            data = messages.TypedData(bytes=blob.content)
            metadata = blob_trigger_metadata(spec, container, blob_name, blob)
            try:
                self._invoker.invoke(spec, {spec.trigger_parameter: data}, metadata)
            except HostStoppingError:
                raise
            except Exception:
                failed += 1
        if failed:
            return _deliveries_failed(spec, failed, len(events))
        return OutgoingResponse(202)


def _deliveries_failed(spec: FunctionSpec, failed: int, total: int) -> OutgoingResponse:
    """500, so that the sender retries (Event Grid's policy): the events' function failed."""
    detail = (
        f"function {spec.name} failed for {failed} of {total} event(s); the host's log says why"
    )
    return problem(500, "function-failed", detail)
