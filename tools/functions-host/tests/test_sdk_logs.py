"""The SDK's failed-callback ERROR for a dropped connection is lowered; others stay."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from azure.servicebus._pyamqp.error import AMQPConnectionError, ErrorCondition
from azure.servicebus._pyamqp.receiver import ReceiverLink

from functions_host.sdk_logs import lower_connection_drop_lines


def callback_failing_with(error: Exception) -> None:
    """The SDK's own receiver link running a transfer callback that raises ``error``."""

    def on_transfer(frame: Any, message: Any) -> None:
        raise error

    link = SimpleNamespace(_on_transfer=on_transfer, network_trace_params={})
    ReceiverLink._process_incoming_message(link, None, None)  # type: ignore[no-untyped-call, arg-type]


def test_a_dropped_connection_is_no_error(caplog: pytest.LogCaptureFixture) -> None:
    lower_connection_drop_lines()
    lower_connection_drop_lines()  # once, however often it is installed
    dropped = AMQPConnectionError(ErrorCondition.SocketError, description="Broken pipe")
    with caplog.at_level(logging.INFO):
        callback_failing_with(dropped)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    with caplog.at_level(logging.DEBUG, logger="azure.servicebus._pyamqp.receiver"):
        callback_failing_with(dropped)
    [kept] = [r for r in caplog.records if "Transfer callback" in r.getMessage()]
    assert kept.levelname == "DEBUG"


def test_any_other_callback_failure_stays_an_error(caplog: pytest.LogCaptureFixture) -> None:
    lower_connection_drop_lines()
    with caplog.at_level(logging.INFO):
        callback_failing_with(ValueError("a bug in the callback"))
    [line] = [r for r in caplog.records if "Transfer callback" in r.getMessage()]
    assert line.levelno == logging.ERROR
