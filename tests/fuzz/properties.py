"""The properties every answer of the app must have, whatever was sent.

- no 5xx: nothing a caller sends is the service's fault (503, a dependency down, is the
  one 5xx allowed, and only with ``Retry-After``; the fuzz stack has no outage, so any
  503 is reported too);
- every error (4xx) is ``application/problem+json`` with the RFC 9457 members ``type``,
  ``title``, ``status`` (equal to the HTTP status) and ``detail``;
- nothing accepted (202) without a job: the status API serves the job at once; and
  without a message: checked at the end of the run (``Accepted``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import event

from tests.e2e.conftest import Stack
from tests.fuzz.strategies import Call

PROBLEM_MEMBERS = {"type": str, "title": str, "status": int, "detail": str}


@dataclass(frozen=True)
class AcceptedRequest:
    """An accepted request and the headers that let its caller look it up."""

    request_id: str
    lookup: dict[str, str]
    door: str


@dataclass
class Accepted:
    """Every request the app accepted during the run, checked for a message at the end."""

    requests: list[AcceptedRequest] = field(default_factory=list)


def send(stack: Stack, call: Call) -> tuple[int, dict[str, str], bytes]:
    """Send the call; its status is a Hypothesis event (``--hypothesis-show-statistics``
    shows how the examples spread over the answers)."""
    status, headers, body = stack.request(call.method, call.path, call.body, call.headers)
    event(f"HTTP {status}")
    return status, headers, body


def header(headers: dict[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), "")


def check_answer(call: Call, status: int, headers: dict[str, str], body: bytes) -> None:
    """No 5xx; every 4xx a complete problem document."""
    shown = f"{call.method} {call.path} -> {status}: {body[:400]!r}"
    assert status < 500, f"server error: {shown}"
    if status < 400:
        return
    content_type = header(headers, "Content-Type").split(";")[0].strip()
    assert content_type == "application/problem+json", f"not problem+json ({content_type}): {shown}"
    document: Any = json.loads(body)
    assert isinstance(document, dict), shown
    for member, kind in PROBLEM_MEMBERS.items():
        assert isinstance(document.get(member), kind), f"problem lacks {member}: {shown}"
    assert document["status"] == status, f"problem status differs from HTTP's: {shown}"


def check_submission_accepted(
    stack: Stack, call: Call, status: int, body: bytes, accepted: Accepted
) -> None:
    """A 202 from ``/api/v1/requests`` names a job the status API serves to its caller."""
    if status != 202:
        return
    document = json.loads(body)
    request_id = str(document["id"])
    lookup = {k: v for k, v in call.headers.items() if k.lower() != "content-type"}
    found, _, raw = stack.request("GET", f"/api/v1/requests/{request_id}", None, lookup)
    assert found == 200, f"accepted {request_id} but its job is not served ({found}): {raw[:300]!r}"
    assert json.loads(raw)["id"] == request_id
    accepted.requests.append(AcceptedRequest(request_id, lookup, "http"))


def check_delivery_accepted(
    stack: Stack, call: Call, status: int, body: bytes, accepted: Accepted
) -> None:
    """A 202 from the webhook: each accepted event names a request whose job exists."""
    if status != 202:
        return
    outcomes = json.loads(body)["events"]
    for outcome in outcomes:
        if outcome["status"] != "accepted":
            continue
        request_id = outcome.get("request_id")
        assert request_id, f"an accepted event without a request id: {outcome}"
        tenant = _event_tenant(call, str(outcome["event_id"]))
        found, _, raw = stack.request(
            "GET", f"/api/v1/requests/{request_id}", None, {"X-Tenant-Id": tenant}
        )
        assert found == 200, f"accepted event {outcome} has no job ({found}): {raw[:300]!r}"
        accepted.requests.append(
            AcceptedRequest(str(request_id), {"X-Tenant-Id": tenant}, "webhook")
        )


def _event_tenant(call: Call, event_id: str) -> str:
    """The ``data.tenant_id`` of the event with this id in the delivery."""
    document: Any = json.loads(call.body or b"null")
    items = document if isinstance(document, list) else [document]
    for item in items:
        if isinstance(item, dict) and str(item.get("id")) == event_id:
            data = item.get("data")
            if isinstance(data, dict):
                return str(data.get("tenant_id"))
    if call.headers.get("ce-id") == event_id:
        return str(json.loads(call.body or b"{}").get("tenant_id"))
    raise AssertionError(f"accepted event {event_id} is not in the delivery")
