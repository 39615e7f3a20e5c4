"""Publish requests read into CloudEvents, as a namespace topic accepts them.

Namespace topics take CloudEvents 1.0 in the three HTTP content modes: structured
(``application/cloudevents+json``, one JSON object), batched
(``application/cloudevents-batch+json``, a JSON array; what ``EventGridPublisherClient.send``
always sends) and binary (attributes in ``ce-*`` headers, the body is the data). Every
event is checked against the CloudEvents rules the service enforces and stored in
structured form, which is also how it is received and pushed.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Mapping
from typing import Any

from .errors import ApiError, bad_request

MAX_REQUEST_BYTES = 1024 * 1024  # the service's limit for one request and for one event
STRUCTURED = "application/cloudevents+json"
BATCH = "application/cloudevents-batch+json"
_REQUIRED = ("id", "source", "type", "specversion")
_OPTIONAL_STRINGS = ("subject", "datacontenttype", "dataschema", "time")
_ATTRIBUTE_NAME = re.compile(r"^[a-z0-9]{1,20}$")
_RESERVED = {"data", "data_base64"}


def media_type(content_type: str) -> str:
    """``application/cloudevents+json`` of ``application/cloudevents+json; charset=utf-8``."""
    return content_type.split(";", 1)[0].strip().lower()


def _is_json_media(media: str) -> bool:
    return media == "application/json" or media.endswith("+json") or media.endswith("/json")


def _check_time(value: str) -> None:
    try:
        dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError as error:
        raise bad_request(
            f"The 'time' attribute is not an RFC 3339 timestamp: {value!r}"
        ) from error


def validate_event(event: Any) -> dict[str, Any]:
    """The event if it is a valid CloudEvent 1.0; ApiError 400 says why not."""
    if not isinstance(event, Mapping):
        raise bad_request("A CloudEvent must be a JSON object.")
    for name in _REQUIRED:
        value = event.get(name)
        if not isinstance(value, str) or not value:
            raise bad_request(f"The required CloudEvents attribute '{name}' is missing or empty.")
    if event["specversion"] != "1.0":
        raise bad_request(f"Unsupported specversion {event['specversion']!r}: only 1.0.")
    for name in _OPTIONAL_STRINGS:
        if name in event and event[name] is not None and not isinstance(event[name], str):
            raise bad_request(f"The CloudEvents attribute '{name}' must be a string.")
    if isinstance(event.get("time"), str):
        _check_time(event["time"])
    if "data" in event and "data_base64" in event:
        raise bad_request("A CloudEvent carries either 'data' or 'data_base64', not both.")
    if "data_base64" in event:
        try:
            base64.b64decode(str(event["data_base64"]), validate=True)
        except ValueError as error:
            raise bad_request("'data_base64' is not valid base64.") from error
    for name in event:
        if name not in _RESERVED and not _ATTRIBUTE_NAME.match(name):
            raise bad_request(
                f"Invalid CloudEvents attribute name {name!r}: lowercase letters and digits only."
            )
    if len(json.dumps(event).encode()) > MAX_REQUEST_BYTES:
        raise ApiError(413, "PayloadTooLarge", "An event may not exceed 1 MB.")
    return dict(event)


def _binary_event(headers: Mapping[str, str], body: bytes, content_type: str) -> dict[str, Any]:
    event: dict[str, Any] = {}
    for name, value in headers.items():
        if name.lower().startswith("ce-"):
            event[name[3:].lower()] = value
    if content_type:
        event["datacontenttype"] = content_type
    if body:
        media = media_type(content_type)
        if _is_json_media(media):
            try:
                event["data"] = json.loads(body)
            except ValueError as error:
                raise bad_request("The body is not the JSON its content type says.") from error
        elif media.startswith("text/"):
            event["data"] = body.decode("utf-8", errors="replace")
        else:
            event["data_base64"] = base64.b64encode(body).decode()
    return event


def parse_publish(
    content_type: str, headers: Mapping[str, str], body: bytes
) -> list[dict[str, Any]]:
    """The events of one publish request, validated; ApiError when the request is refused."""
    media = media_type(content_type)
    if media in (STRUCTURED, BATCH):
        try:
            document = json.loads(body)
        except ValueError as error:
            raise bad_request("The request body is not valid JSON.") from error
        if media == BATCH:
            if not isinstance(document, list):
                raise bad_request(f"{BATCH} requires a JSON array of CloudEvents.")
            if not document:
                raise bad_request("The batch contains no events.")
            return [validate_event(event) for event in document]
        if not isinstance(document, Mapping):
            raise bad_request(f"{STRUCTURED} requires a single CloudEvent JSON object.")
        return [validate_event(document)]
    if any(name.lower() == "ce-specversion" for name in headers):
        return [validate_event(_binary_event(headers, body, content_type))]
    raise ApiError(
        415,
        "UnsupportedMediaType",
        f"Unsupported content type {content_type!r}: use {STRUCTURED}, {BATCH} "
        "or the binary content mode (ce-* headers).",
    )
