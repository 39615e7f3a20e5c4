"""What the fuzzer sends to the Event Grid webhook (``/api/v1/events``): deliveries in
each schema and content mode (Event Grid arrays, CloudEvents structured, batch and
binary), the validation event, the ``OPTIONS`` handshake, and odd ones (non-base64
``data_base64``, wrong types, bodies that are not JSON). Mostly valid, one thing wrong.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.strategies import (
    Call,
    content_types,
    encode,
    header_text,
    json_value,
    mostly,
    mutated,
    raw_body,
)

DELIVERY_SECRET = "fuzz-webhook-secret"


def _request_data(draw: st.DrawFn) -> Any:
    valid = {"tenant_id": "fuzz-tenant", "input": {"text": "Invoice 3. Amount due: 7 EUR."}}
    extra = ["model", "parameters", "priority", "metadata"]
    return draw(mostly(st.just(valid), st.one_of(mutated(valid, extra), json_value)))


@st.composite
def eventgrid_event(draw: st.DrawFn) -> Any:
    valid = {
        "id": draw(st.one_of(st.uuids().map(str), st.just("same-id"))),
        "topic": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.EventGrid/topics/apps",
        "subject": "requests",
        "eventType": draw(
            mostly(
                st.just("com.inferbus.InferenceRequested"),
                st.sampled_from(
                    [
                        "Microsoft.EventGrid.SubscriptionValidationEvent",
                        "Microsoft.Storage.BlobCreated",
                        "Other.Type",
                    ]
                ),
            )
        ),
        "eventTime": datetime.now(UTC).isoformat(),
        "data": _request_data(draw),
        "dataVersion": "1",
    }
    if valid["eventType"].endswith("ValidationEvent"):
        valid["data"] = draw(st.one_of(st.just({"validationCode": "c0de"}), json_value))
    return draw(mostly(st.just(valid), st.one_of(mutated(valid, ["metadataVersion"]), json_value)))


@st.composite
def cloud_event(draw: st.DrawFn) -> Any:
    valid: dict[str, Any] = {
        "specversion": draw(mostly(st.just("1.0"), st.sampled_from(["0.3", 1]))),
        "id": draw(st.one_of(st.uuids().map(str), st.just("same-id"))),
        "source": "/apps/fuzz",
        "type": draw(mostly(st.just("com.inferbus.InferenceRequested"), st.just("Other.Type"))),
        "time": datetime.now(UTC).isoformat(),
    }
    payload = draw(st.sampled_from(["data", "data_base64", "both", "none"]))
    if payload in ("data", "both"):
        valid["data"] = _request_data(draw)
    if payload in ("data_base64", "both"):
        valid["data_base64"] = draw(
            st.one_of(
                st.binary(max_size=50).map(lambda b: base64.b64encode(b).decode()),
                st.sampled_from(["***", "abc", "====", "\ud800"]),
                json_value,
            )
        )
    extra = ["datacontenttype", "subject", "ext1"]
    return draw(mostly(st.just(valid), st.one_of(mutated(valid, extra), json_value)))


@st.composite
def deliveries(draw: st.DrawFn) -> Call:
    """A webhook delivery in each schema and content mode, and odd ones."""
    headers: dict[str, str] = {}
    secret = draw(mostly(st.just(DELIVERY_SECRET), st.sampled_from([None, "wrong", ""])))
    if secret is not None:
        headers["X-Webhook-Secret"] = secret
    mode = draw(st.sampled_from(["eventgrid", "structured", "batch", "binary", "raw"]))
    if mode == "eventgrid":
        body = encode(draw(st.lists(eventgrid_event(), max_size=3)))
        headers["Content-Type"] = "application/json"
        if draw(st.booleans()):
            headers["aeg-event-type"] = draw(
                st.sampled_from(["SubscriptionValidation", "Notification"])
            )
    elif mode == "structured":
        body = encode(draw(cloud_event()))
        headers["Content-Type"] = "application/cloudevents+json; charset=utf-8"
    elif mode == "batch":
        body = encode(draw(st.one_of(st.lists(cloud_event(), max_size=3), cloud_event())))
        headers["Content-Type"] = "application/cloudevents-batch+json"
    elif mode == "binary":
        headers.update(
            {
                "ce-specversion": "1.0",
                "ce-id": draw(header_text),
                "ce-source": "/apps/x",
                "ce-type": "com.inferbus.InferenceRequested",
            }
        )
        headers["Content-Type"] = draw(st.sampled_from(["application/json", "text/plain", ""]))
        body = encode(_request_data(draw)) if draw(st.booleans()) else draw(raw_body)
    else:
        headers["Content-Type"] = draw(content_types)
        body = draw(raw_body)
    return Call("POST", "/api/v1/events", body, headers)


@st.composite
def handshakes(draw: st.DrawFn) -> Call:
    """The CloudEvents abuse-protection handshake (OPTIONS), well and badly formed."""
    headers: dict[str, str] = {}
    if draw(st.integers(0, 3)):
        headers["WebHook-Request-Origin"] = draw(
            st.one_of(st.just("eventgrid.azure.net"), header_text)
        )
    if draw(st.booleans()):
        headers["WebHook-Request-Rate"] = draw(st.one_of(st.just("120"), header_text))
    return Call("OPTIONS", "/api/v1/events", None, headers)
