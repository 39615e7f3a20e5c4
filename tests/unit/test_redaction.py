"""No secret in a log line: credential query parameters and headers are redacted."""

from __future__ import annotations

import logging

import pytest

from shared.entrypoints.http.messages import ApiRequest, guarded
from shared.redaction import REDACTED, redact_headers, redact_text, redact_url
from tests.support.wiring import Wired, api_request

KEY = "Zk3yS3cr3t-value=="


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            f"http://localhost:7071/api/v1/requests?code={KEY}",
            "http://localhost:7071/api/v1/requests?code=***",
        ),
        (
            f"https://a.blob.core.windows.net/c/b?sv=2024&sig={KEY}&se=2026",
            "https://a.blob.core.windows.net/c/b?sv=2024&sig=***&se=2026",
        ),
        (
            f"http://h/x?model=m&access_token={KEY}&ApiKey={KEY}#frag",
            "http://h/x?model=m&access_token=***&ApiKey=***#frag",
        ),
        (f"http://h/x?client_secret={KEY}&x-functions-key={KEY}", None),
        (
            "http://h/x?model=local-analyzer&priority=high",
            "http://h/x?model=local-analyzer&priority=high",
        ),
        ("http://h/plain", "http://h/plain"),
    ],
)
def test_credentials_in_urls_are_redacted_and_the_rest_is_kept(
    url: str, expected: str | None
) -> None:
    redacted = redact_url(url)
    assert KEY not in redacted
    if expected is not None:
        assert redacted == expected


def test_urls_inside_a_message_are_redacted() -> None:
    text = f"POST http://h/api/v1/events?code={KEY} -> 400 and https://x/y?sig={KEY} too"
    assert (
        redact_text(text)
        == "POST http://h/api/v1/events?code=*** -> 400 and https://x/y?sig=*** too"
    )


def test_credential_headers_are_redacted_by_name() -> None:
    headers = {
        "x-functions-key": KEY,
        "Authorization": f"Bearer {KEY}",
        "X-Webhook-Secret": KEY,
        "x-ms-client-principal": KEY,
        "x-ms-token-aad-access-token": KEY,
        "Cookie": KEY,
        "content-type": "application/json",
        "traceparent": "00-abc-def-01",
    }
    redacted = redact_headers(headers)
    assert redacted["content-type"] == "application/json"
    assert redacted["traceparent"] == "00-abc-def-01"
    assert [name for name, value in redacted.items() if value == REDACTED] == list(headers)[:6]
    assert redact_headers([("X-Functions-Key", KEY)]) == {"X-Functions-Key": REDACTED}


def test_the_api_logs_a_refused_request_without_its_key(
    wired: Wired, caplog: pytest.LogCaptureFixture
) -> None:
    request = api_request("POST", f"/v1/requests?code={KEY}", body=b"{nope", tenant="t1")
    request = ApiRequest(
        request.method,
        request.url,
        {**request.headers, "content-type": "application/json"},
        body=request.body,
    )
    with caplog.at_level(logging.DEBUG):
        response = guarded(wired.http.requests.submit, request)
    assert response.status == 400
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "code=***" in logged
    assert KEY not in logged
