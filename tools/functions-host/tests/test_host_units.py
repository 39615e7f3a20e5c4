"""Small pieces of the host (unit tests, no services)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions_host.config import HostConfigError, parse_timespan, resolve_binding
from functions_host.eventgrid_delivery import RetryPolicy
from functions_host.functions import FunctionSpec, spec_from_metadata
from functions_host.host import SUPPORTED_TRIGGERS, TRIGGER_KINDS, Address
from functions_host.http_messages import from_return_value
from functions_host.invocation import trace_parent_for
from functions_host.protos import messages
from functions_host.webhooks import path_parameters


def test_event_grid_retry_schedule() -> None:
    policy = RetryPolicy()
    assert [policy.delay_after(attempt, 500) for attempt in (1, 2, 3, 4)] == [10, 30, 60, 300]
    assert policy.delay_after(1, 503) == 30  # 503: at least 30 s
    assert policy.delay_after(1, 408) == 120  # 408: at least 2 min
    assert policy.delay_after(12, 500) == 43200  # then every 12 hours
    for final in (200, 202, 204, 400, 401, 403, 413):
        assert policy.delay_after(1, final) is None
    assert policy.delay_after(30, 500) is None  # 30 attempts at most
    assert RetryPolicy(time_scale=0.01).delay_after(1, 0) == pytest.approx(0.1)


def test_timespans_and_setting_references() -> None:
    assert parse_timespan("00:10:00") == 600
    assert parse_timespan("1.02:00:00") == 93600
    assert parse_timespan("00:00:01.5") == 1.5
    with pytest.raises(HostConfigError):
        parse_timespan("10m")
    environ = {"Queue": "requests"}
    assert resolve_binding({"queueName": "%Queue%", "n": 1}, environ) == {
        "queueName": "requests",
        "n": 1,
    }
    with pytest.raises(HostConfigError, match="Missing"):
        resolve_binding({"path": "%Missing%/{name}"}, environ)


def _metadata(name: str, *bindings: dict[str, object]) -> object:
    return messages.RpcFunctionMetadata(
        name=name, function_id=f"id-{name}", raw_bindings=[json.dumps(b) for b in bindings]
    )


def test_function_specs_come_from_the_workers_metadata_with_settings_resolved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("Queue", "requests")
    trigger: dict[str, object] = {
        "type": "serviceBusTrigger",
        "name": "messages",
        "queueName": "%Queue%",
        "properties": {"SupportsDeferredBinding": True},
    }

    spec = spec_from_metadata(_metadata("process", trigger))

    assert spec is not None
    assert (spec.function_id, spec.trigger_type, spec.trigger_parameter) == (
        "id-process",
        "serviceBusTrigger",
        "messages",
    )
    assert spec.trigger["queueName"] == "requests"
    assert spec.supports_deferred_binding
    # A missing setting puts that function (only) in an error state.
    assert spec_from_metadata(_metadata("broken", {**trigger, "queueName": "%Nope%"})) is None
    assert spec_from_metadata(_metadata("no_trigger", {"type": "blob", "name": "b"})) is None


def test_http_return_values_become_responses() -> None:
    cookie = messages.RpcHttpCookie(name="a", value="1", same_site=messages.RpcHttpCookie.Lax)
    cookie.path.value = "/api"
    cookie.domain.value = ""
    cookie.http_only.value = True
    http = messages.RpcHttp(
        status_code="201",
        headers={"content-type": "text/csv"},
        body=messages.TypedData(bytes=b"a,b"),
        cookies=[cookie],
    )

    response = from_return_value(messages.TypedData(http=http))

    assert (response.status, response.body) == (201, b"a,b")
    assert ("Set-Cookie", "a=1; Path=/api; HttpOnly; SameSite=Lax") in response.headers
    assert from_return_value(messages.TypedData(string="hi")).body == b"hi"
    assert from_return_value(None).status == 204


def test_blob_path_parameters_and_trace_parents() -> None:
    assert path_parameters("incoming/{name}", "contoso/a b.pdf") == {"name": "contoso/a b.pdf"}
    assert path_parameters("c/{tenant}/{file}.txt", "t1/x.txt") == {"tenant": "t1", "file": "x"}
    assert path_parameters("c/{tenant}/{file}.txt", "t1/x.pdf") == {}
    caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert trace_parent_for(caller) == caller
    assert trace_parent_for("not-a-trace") != "not-a-trace"
    assert trace_parent_for(None).startswith("00-")


def test_each_trigger_kind_describes_its_functions_and_names_its_source() -> None:
    def spec(trigger_type: str, **trigger: Any) -> FunctionSpec:
        return FunctionSpec("f", "id", trigger_type, dict(trigger), [])

    where = Address("http://127.0.0.1:7071", "api")
    listed = {
        kind: TRIGGER_KINDS[kind].describe(spec(kind, **trigger), where)
        for kind, trigger in (
            ("httpTrigger", {"methods": ["GET"], "route": "jobs/{id}"}),
            ("eventGridTrigger", {}),
            ("blobTrigger", {"path": "incoming/{name}", "source": "EventGrid"}),
            ("serviceBusTrigger", {"queueName": "requests", "cardinality": "Many"}),
            ("timerTrigger", {"schedule": "0 */5 * * * *"}),
        )
    }
    assert listed == {
        "httpTrigger": "[GET] http://127.0.0.1:7071/api/jobs/{id}",
        "eventGridTrigger": (
            "eventGridTrigger http://127.0.0.1:7071/runtime/webhooks/eventgrid?functionName=f"
        ),
        "blobTrigger": "blobTrigger incoming/{name} (source EventGrid)",
        "serviceBusTrigger": "serviceBusTrigger requests (cardinality many)",
        "timerTrigger": "timerTrigger 0 */5 * * * *",
    }
    assert set(listed) == SUPPORTED_TRIGGERS
    # The HTTP server and the blob watcher serve their kinds; the others start a source.
    started = {kind for kind, entry in TRIGGER_KINDS.items() if entry.source is not None}
    assert started == {"serviceBusTrigger", "timerTrigger"}
