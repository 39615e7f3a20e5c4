"""Caller text cannot forge a log line: every record a door makes from caller input is
one line, its control characters written visibly (``shared.log_lines``)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

from shared.adapters.in_memory import RecordingSettler
from shared.entrypoints import functions
from shared.events.incoming import IncomingEvent
from shared.lanes import Lane
from shared.log_lines import install_one_line_records, one_line
from shared.processing.inbound import InboundMessage
from tests.support.events import requested_event
from tests.support.wiring import Wired, api_request, wire

TENANT = "contoso"
# The forged line of the report, and the other codes that reached the log.
FORGED = "zz\r\n2026-12-04 00:00:00,000 ERROR injected.line: FAKE"
CODES = "\x1b[31mred\x00\x01\x1f\x7f\x85\u2028end"
RAW_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The records of the test, with the app's one-line records installed."""
    install_one_line_records()
    with caplog.at_level(logging.DEBUG):
        yield caplog


def assert_one_line_each(records: pytest.LogCaptureFixture, *, escaped: str) -> None:
    """No record's message holds a raw control character, and the caller's text was
    logged, escaped (so the door does log it: the check is not vacuous)."""
    messages = [record.getMessage() for record in records.records]
    raw = [m for m in messages if RAW_CONTROL.search(m)]
    assert raw == [], raw
    assert any(escaped in m for m in messages), messages


@pytest.fixture
def wired() -> Wired:
    return wire()


def test_one_line_writes_every_control_character_visibly() -> None:
    assert one_line(FORGED) == "zz\\r\\n2026-12-04 00:00:00,000 ERROR injected.line: FAKE"
    assert one_line(CODES) == "\\x1b[31mred\\x00\\x01\\x1f\\x7f\\x85\\u2028end"
    assert one_line("tab\there é ✓") == "tab\\there é ✓"


def test_the_forged_request_leaves_one_line_with_its_cr_lf_escaped(
    wired: Wired, records: pytest.LogCaptureFixture
) -> None:
    document = {"model": "local-analyzer", "input": {"text": "x"}, "after": FORGED}
    request = api_request("POST", "/v1/requests", body=document, tenant=TENANT)
    response = wired.call(wired.http.requests.submit, request)

    assert response.status == 400
    assert FORGED in json.loads(response.body)["detail"], "the answer keeps the caller's text"
    forged = [r for r in records.records if "injected.line" in r.getMessage()]
    assert len(forged) == 1
    assert "zz\\r\\n2026-12-04 00:00:00,000 ERROR injected.line: FAKE" in forged[0].getMessage()


def test_http_routes_and_query_values(wired: Wired, records: pytest.LogCaptureFixture) -> None:
    job_id = f"id{CODES}"
    lookup = api_request(
        "GET", f"/v1/requests/{job_id}", route_params={"id": job_id}, tenant=TENANT
    )
    wired.call(wired.http.requests.status, lookup)
    upload = api_request("POST", "/v1/requests", params={"model": CODES}, body=b"raw",
                          headers={"content-type": "text/plain"}, tenant=TENANT)  # fmt: skip
    wired.call(wired.http.requests.submit, upload)
    assert_one_line_each(records, escaped="\\x1b[31mred")


def test_the_webhook_and_the_event_grid_trigger(
    wired: Wired, records: pytest.LogCaptureFixture
) -> None:
    event = requested_event(TENANT, f"ev{CODES}")
    event["data"]["priority"] = FORGED
    request = api_request(
        "POST", "/v1/events", body=json.dumps(event).encode(),
        headers={"content-type": "application/cloudevents+json"},
    )  # fmt: skip
    wired.call(wired.http.webhook.handle, request)
    functions.handle_event(
        wired.services,
        IncomingEvent(id=f"eg{CODES}", type=f"com.example{CODES}", source="/x", subject=None,
                      data={"tenant_id": TENANT}, schema="eventgrid"),
    )  # fmt: skip
    assert_one_line_each(records, escaped="ev\\x1b[31mred")
    assert any("eg\\x1b[31mred" in r.getMessage() for r in records.records)


def test_blob_names(wired: Wired, records: pytest.LogCaptureFixture) -> None:
    name = f"{TENANT}/scan{CODES}.txt"
    wired.blobs.upload("incoming", name, b"a scanned letter", "text/plain", {})
    content = iter([b"a scanned letter", b""])
    functions.handle_new_blob(wired.services, f"incoming/{name}", lambda _: next(content))
    assert_one_line_each(records, escaped="scan\\x1b[31mred")


def test_producer_messages(wired: Wired, records: pytest.LogCaptureFixture) -> None:
    body: dict[str, Any] = {"schema": "inferbus.request/v1", "request_id": FORGED}
    message = InboundMessage(
        body=json.dumps(body).encode(), message_id=f"m{CODES}", sequence_number=1,
        delivery_count=1, enqueued_time=None, application_properties={"tenant": TENANT},
    )  # fmt: skip
    outcome = wired.services.lanes[Lane.STANDARD].processor.process(message, RecordingSettler())
    assert outcome == "dead-lettered"
    assert_one_line_each(records, escaped="m\\x1b[31mred")
