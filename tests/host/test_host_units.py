"""Small pieces of the host and the stack launcher (unit tests, no services)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from devtools.host.app_loader import FunctionSpec
from devtools.host.config import HostConfigError, parse_timespan, resolve_binding
from devtools.host.eventgrid_delivery import RetryPolicy
from devtools.host.invocation import FunctionTimeoutError, HostStoppingError, Invoker
from devtools.processes import describe_port
from devtools.stack import servicebus_endpoint, storage_ports


def spec(function: Callable[..., Any], name: str = "f") -> FunctionSpec:
    return FunctionSpec(
        name=name,
        trigger_type="httpTrigger",
        trigger={"name": "req", "type": "httpTrigger"},
        bindings=[],
        user_function=function,
        is_async=asyncio.iscoroutinefunction(function),
        parameters=("req",),
    )


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


def test_invoker_runs_sync_and_async_functions_and_enforces_the_timeout() -> None:
    async def coroutine_function(req: str) -> str:
        await asyncio.sleep(0)
        return f"async {req}"

    def slow(req: str) -> None:
        time.sleep(1)

    invoker = Invoker(function_timeout_s=0.2, script_root=".")
    try:
        assert invoker.invoke(spec(lambda req: f"sync {req}"), {"req": "a"}) == "sync a"
        assert invoker.invoke(spec(coroutine_function), {"req": "b"}) == "async b"
        with pytest.raises(FunctionTimeoutError):
            invoker.invoke(spec(slow), {"req": "c"})
        invoker.stop_accepting()
        with pytest.raises(HostStoppingError):
            invoker.invoke(spec(lambda req: None), {"req": "d"})
        assert invoker.drain(5)
    finally:
        invoker.close()


def test_stack_reads_ports_from_connection_strings() -> None:
    values = {
        "AzureWebJobsStorage": (
            "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=k;"
            "BlobEndpoint=http://127.0.0.1:20000/a;QueueEndpoint=http://127.0.0.1:20001/a;"
        ),
        "ServiceBusConnection": "Endpoint=sb://127.0.0.1:5999;SharedAccessKeyName=n;"
        "SharedAccessKey=secret;UseDevelopmentEmulator=true",
    }
    assert storage_ports(values) == {"Blob": 20000, "Queue": 20001, "Table": 10002}
    assert storage_ports({"AzureWebJobsStorage": "UseDevelopmentStorage=true"})["Blob"] == 10000
    assert servicebus_endpoint(values) == (5999, "secret")


def test_stack_tells_a_free_port_from_a_foreign_listener() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        assert describe_port(port) == "free"
        listener.listen()
        # Accepts connections but neither answers HTTP nor AMQP.
        assert describe_port(port) == "other"
