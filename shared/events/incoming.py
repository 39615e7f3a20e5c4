"""Event Grid push deliveries, parsed without the SDK: both schemas, every content mode.

Event Grid delivers to a webhook either in its own schema (a JSON array; the validation
handshake arrives as ``Microsoft.EventGrid.SubscriptionValidationEvent`` with header
``aeg-event-type: SubscriptionValidation``) or as CloudEvents 1.0 in one of three content
modes: structured (``application/cloudevents+json``, one event), batch
(``application/cloudevents-batch+json``, an array) and binary (attributes in ``ce-*``
headers, the body is the data). Everything here is normalised to ``IncomingEvent``.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shared.bounded_json import parse_json
from shared.errors import FieldError, InvalidInput, PayloadTooLarge

VALIDATION_EVENT_TYPE = "Microsoft.EventGrid.SubscriptionValidationEvent"
BLOB_CREATED = "Microsoft.Storage.BlobCreated"
INFERENCE_REQUESTED = "com.inferbus.InferenceRequested"
# Event Grid limits an event to 1 MB and a delivery batch to about the same.
MAX_DELIVERY_BYTES = 1_048_576
CLOUDEVENTS_REQUIRED = ("specversion", "id", "source", "type")
OPTIONAL_STRINGS = ("subject", "time", "datacontenttype", "dataschema")


@dataclass(frozen=True)
class IncomingEvent:
    id: str
    type: str
    source: str
    subject: str | None
    data: Any
    schema: str  # "eventgrid" or "cloudevents"
    time: str | None = None
    extensions: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ValidationRequest:
    """The Event Grid schema handshake: echo the code to prove we own the endpoint."""

    code: str
    url: str | None


def _invalid(message: str) -> InvalidInput:
    return InvalidInput(message, (FieldError("body", message),))


def event_from_eventgrid(item: Any) -> IncomingEvent:
    """One event in Event Grid schema; InvalidInput when required fields are missing."""
    if not isinstance(item, dict):
        raise _invalid("each Event Grid event must be a JSON object")
    missing = [k for k in ("id", "eventType", "eventTime") if not item.get(k)]
    if "subject" not in item:
        missing.append("subject")
    if missing:
        raise _invalid("Event Grid event lacks " + ", ".join(missing))
    return IncomingEvent(
        id=str(item["id"]),
        type=str(item["eventType"]),
        source=str(item.get("topic") or ""),
        subject=str(item["subject"] or ""),
        data=item.get("data"),
        schema="eventgrid",
        time=str(item["eventTime"]),
    )


def _not_string(item: dict[str, Any], key: str) -> bool:
    return key in item and item[key] is not None and not isinstance(item[key], str)


def _base64_data(encoded: Any) -> bytes:
    """``data_base64``: binary data as a base64 string (CloudEvents JSON format)."""
    if not isinstance(encoded, str):
        raise _invalid("CloudEvent data_base64 must be a base64 string")
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as error:
        raise _invalid(f"CloudEvent data_base64 is not valid base64: {error}") from error


def event_from_cloudevent(item: Any) -> IncomingEvent:
    if not isinstance(item, dict):
        raise _invalid("each CloudEvent must be a JSON object")
    missing = [k for k in CLOUDEVENTS_REQUIRED if not item.get(k)]
    if missing:
        raise _invalid("CloudEvent lacks required attributes: " + ", ".join(missing))
    not_strings = [k for k in (*CLOUDEVENTS_REQUIRED, *OPTIONAL_STRINGS) if _not_string(item, k)]
    if not_strings:
        raise _invalid("CloudEvent attributes must be strings: " + ", ".join(not_strings))
    if item["specversion"] != "1.0":
        raise _invalid(f"unsupported CloudEvents specversion {item['specversion']!r}")
    data = item.get("data")
    if data is None and "data_base64" in item:
        data = _base64_data(item["data_base64"])
    known = {
        "specversion",
        "id",
        "source",
        "type",
        "subject",
        "time",
        "data",
        "data_base64",
        "datacontenttype",
        "dataschema",
    }
    return IncomingEvent(
        id=str(item["id"]),
        type=str(item["type"]),
        source=str(item["source"]),
        subject=item.get("subject"),
        data=data,
        schema="cloudevents",
        time=item.get("time"),
        extensions={k: v for k, v in item.items() if k not in known},
    )


def _binary_cloudevent(headers: Mapping[str, str], body: bytes) -> IncomingEvent:
    attributes = {k[3:]: v for k, v in headers.items() if k.startswith("ce-")}
    content_type = headers.get("content-type", "")
    data: Any = body
    if content_type.split(";")[0].strip().endswith("json") and body:
        data = parse_json(body, max_bytes=MAX_DELIVERY_BYTES, what="the binary-mode event data")
    return event_from_cloudevent({**attributes, "data": data, "datacontenttype": content_type})


def parse_delivery(
    headers: Mapping[str, str], body: bytes
) -> ValidationRequest | list[IncomingEvent]:
    """A delivery's events, or the validation handshake. ``headers`` keys are lower case.

    Raises PayloadTooLarge (413) or InvalidInput (400): both tell Event Grid not to retry.
    """
    if len(body) > MAX_DELIVERY_BYTES:
        raise PayloadTooLarge(
            f"the delivery is {len(body)} bytes; the limit is {MAX_DELIVERY_BYTES}"
        )
    if "ce-specversion" in headers:
        return [_binary_cloudevent(headers, body)]
    media_type = headers.get("content-type", "").split(";")[0].strip().lower()
    document = parse_json(body, max_bytes=MAX_DELIVERY_BYTES, what="the delivery")
    if media_type == "application/cloudevents+json":
        return [event_from_cloudevent(document)]
    if media_type == "application/cloudevents-batch+json":
        if not isinstance(document, list):
            raise _invalid("a CloudEvents batch must be a JSON array")
        return [event_from_cloudevent(item) for item in document]
    items = document if isinstance(document, list) else [document]
    if not items:
        raise _invalid("the delivery holds no events")
    if all(isinstance(i, dict) and "specversion" in i for i in items):
        return [event_from_cloudevent(item) for item in items]
    events = [event_from_eventgrid(item) for item in items]
    validation = next((e for e in events if e.type == VALIDATION_EVENT_TYPE), None)
    if validation is not None or headers.get("aeg-event-type") == "SubscriptionValidation":
        data = validation.data if validation and isinstance(validation.data, dict) else {}
        code = data.get("validationCode")
        if not code:
            raise _invalid("the subscription validation event has no validationCode")
        return ValidationRequest(code=str(code), url=data.get("validationUrl"))
    return events


# --- the shapes above, as schemas (the OpenAPI document of the webhook) --------------------


class CloudEventDocument(BaseModel):
    """A CloudEvent 1.0 in JSON format, as ``event_from_cloudevent`` reads it."""

    model_config = ConfigDict(extra="allow")

    specversion: Literal["1.0"]
    id: str = Field(min_length=1)
    source: str = Field(min_length=1)
    type: str = Field(min_length=1, examples=[INFERENCE_REQUESTED])
    subject: str | None = None
    time: str | None = None
    datacontenttype: str | None = None
    dataschema: str | None = None
    data: Any = None
    data_base64: str | None = None


class EventGridEventDocument(BaseModel):
    """An event in the Event Grid schema, as ``event_from_eventgrid`` reads it."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    eventType: str = Field(min_length=1, examples=[BLOB_CREATED])  # noqa: N815 (Event Grid's name)
    eventTime: str = Field(min_length=1)  # noqa: N815 (Event Grid's name)
    subject: str
    topic: str | None = None
    data: Any = None
    dataVersion: str | None = None  # noqa: N815 (Event Grid's name)
    metadataVersion: str | None = None  # noqa: N815 (Event Grid's name)


class ValidationResponse(BaseModel):
    """The answer to the Event Grid schema's subscription validation handshake."""

    validationResponse: str  # noqa: N815 (Event Grid's name)
