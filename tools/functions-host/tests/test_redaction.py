"""The host's last line of defence: no credential query parameter in a line it writes."""

from __future__ import annotations

import logging

import pytest

from functions_host.protos import messages
from functions_host.redaction import redact
from functions_host.worker_logs import WorkerLogPrinter

KEY = "hostKey-0123456789abcdef=="


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f'"GET /api/x?code={KEY} HTTP/1.1" 200 -', '"GET /api/x?code=*** HTTP/1.1" 200 -'),
        (
            f"POST http://h/api/v1/events?a=1&code={KEY}&b=2",
            "POST http://h/api/v1/events?a=1&code=***&b=2",
        ),
        (f"https://acct.blob/c/b?sv=1&sig={KEY}", "https://acct.blob/c/b?sv=1&sig=***"),
        (
            f"http://h/?access_token={KEY}&x-functions-key={KEY}",
            "http://h/?access_token=***&x-functions-key=***",
        ),
        ("GET /api/v1/requests?model=m 200", "GET /api/v1/requests?model=m 200"),
    ],
)
def test_credential_query_values_are_replaced(line: str, expected: str) -> None:
    assert redact(line) == expected


def test_worker_logs_are_printed_redacted(caplog: pytest.LogCaptureFixture) -> None:
    rpc_log = messages.RpcLog(
        invocation_id="inv-1",
        category="shared.entrypoints.http.messages",
        level=messages.RpcLog.Information,
        message=f"POST http://127.0.0.1:7071/api/v1/requests?code={KEY} -> 400 invalid",
    )
    with caplog.at_level(logging.INFO):
        WorkerLogPrinter({"inv-1": "submit_request"}).print(rpc_log)
    (record,) = caplog.records
    assert record.name == "Function.submit_request.User"
    assert KEY not in record.getMessage()
    assert "code=***" in record.getMessage()
