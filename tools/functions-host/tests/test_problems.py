"""Every error the host answers itself is problem+json, through real HTTP.

The request line and header limits are enforced by ``http.server`` before any handler
runs, so those requests go over a raw socket, sized so that the host has read all of it
when it answers (a socket closed with unread bytes would reset the answer away).
"""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

import pytest

from functions_host.problems import PROBLEM_CONTENT_TYPE, PROBLEM_TYPE_PREFIX
from hostproc import SampleHost, http

pytestmark = pytest.mark.integration
LINE_LIMIT = 65536  # http.server's limit for the request line and for each header line


class RawAnswer:
    def __init__(self, raw: bytes) -> None:
        head, _, self.body = raw.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        self.status = int(status_line.split()[1])
        self.headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()


def _raw(host: SampleHost, payload: bytes) -> RawAnswer:
    """Send ``payload`` as is and read the answer until the host closes the connection."""
    address = urlsplit(host.base_url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as connection:
        connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
    assert received, "the host closed the connection without an answer"
    return RawAnswer(received)


def _problem(status: int, headers: dict[str, Any], body: bytes, code: str) -> dict[str, Any]:
    """The problem document, after checking its content type, shape, status and type."""
    content_type = headers["content-type"]
    if isinstance(content_type, list):
        content_type = content_type[0]
    assert content_type == PROBLEM_CONTENT_TYPE, body[:200]
    document: dict[str, Any] = json.loads(body)
    assert set(document) == {"type", "title", "status", "detail"}
    assert document["status"] == status
    assert document["type"] == PROBLEM_TYPE_PREFIX + code
    assert document["title"]
    assert document["detail"]
    return document


def test_an_over_long_request_line_is_a_414_problem(sample_host: SampleHost) -> None:
    request_line = b"GET /api/hello/" + b"a" * LINE_LIMIT
    answer = _raw(sample_host, request_line[: LINE_LIMIT + 1])
    assert answer.status == 414
    document = _problem(414, answer.headers, answer.body, "uri-too-long")
    assert document["title"] == "URI Too Long"
    assert str(LINE_LIMIT) in document["detail"]
    assert answer.headers["connection"] == "close"


def test_an_over_long_header_line_is_a_431_problem(sample_host: SampleHost) -> None:
    start = b"GET /api/hello/x HTTP/1.1\r\nHost: local\r\n"
    header = b"X-Big: " + b"a" * LINE_LIMIT
    answer = _raw(sample_host, start + header[: LINE_LIMIT + 1])
    assert answer.status == 431
    document = _problem(431, answer.headers, answer.body, "request-header-fields-too-large")
    assert "header" in document["detail"]


def test_too_many_header_fields_is_a_431_problem(sample_host: SampleHost) -> None:
    headers = b"".join(b"X-Field-%d: v\r\n" % index for index in range(101))
    answer = _raw(sample_host, b"GET /api/hello/x HTTP/1.1\r\nHost: local\r\n" + headers)
    assert answer.status == 431
    _problem(431, answer.headers, answer.body, "request-header-fields-too-large")


def test_a_body_over_the_limit_is_a_413_problem_before_it_is_read(
    sample_host: SampleHost,
) -> None:
    declared = 200 * 1024 * 1024
    request = b"POST /api/hello/x HTTP/1.1\r\nHost: local\r\nContent-Length: %d\r\n\r\n" % declared
    answer = _raw(sample_host, request)
    assert answer.status == 413
    document = _problem(413, answer.headers, answer.body, "payload-too-large")
    assert str(declared) in document["detail"]
    assert answer.headers["connection"] == "close"


@pytest.mark.parametrize(
    ("request_bytes", "in_detail"),
    [
        (b"NONSENSE\r\n\r\n", "Bad request syntax"),
        (b"GET /api/hello/x HTTP/x.y\r\n\r\n", "Bad request version"),
        (
            b"POST /api/hello/x HTTP/1.1\r\nHost: local\r\nContent-Length: abc\r\n\r\n",
            "Content-Length 'abc'",
        ),
        (
            b"POST /api/hello/x HTTP/1.1\r\nHost: local\r\nContent-Length: \xb2\r\n\r\n",
            "is not a non-negative integer",
        ),
        (
            b"POST /api/hello/x HTTP/1.1\r\nHost: local\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"zz\r\n",
            "chunk size 'zz'",
        ),
    ],
    ids=["request-line", "version", "content-length", "unicode-digit-length", "chunk-size"],
)
def test_a_malformed_request_is_a_400_problem(
    sample_host: SampleHost, request_bytes: bytes, in_detail: str
) -> None:
    answer = _raw(sample_host, request_bytes)
    assert answer.status == 400
    document = _problem(400, answer.headers, answer.body, "malformed-request")
    assert in_detail in document["detail"]


def test_a_key_in_a_malformed_request_line_is_not_echoed(sample_host: SampleHost) -> None:
    answer = _raw(sample_host, b"GET /api/hello/x?code=s3cr3t extra HTTP/1.1\r\n\r\n")
    document = _problem(400, answer.headers, answer.body, "malformed-request")
    assert "s3cr3t" not in document["detail"]
    assert "code=***" in document["detail"]


def test_an_unsupported_http_version_is_a_505_problem(sample_host: SampleHost) -> None:
    answer = _raw(sample_host, b"GET /api/hello/x HTTP/2.0\r\n\r\n")
    assert answer.status == 505
    _problem(505, answer.headers, answer.body, "http-version-not-supported")


def test_a_method_the_host_does_not_serve_is_a_405_problem(sample_host: SampleHost) -> None:
    answer = _raw(sample_host, b"TRACE /api/hello/x HTTP/1.1\r\nHost: local\r\n\r\n")
    assert answer.status == 405
    document = _problem(405, answer.headers, answer.body, "method-not-allowed")
    assert "TRACE" in document["detail"]
    assert answer.headers["allow"] == "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"


def test_no_route_is_a_404_problem(sample_host: SampleHost) -> None:
    status, headers, body = http("GET", f"{sample_host.base_url}/api/nowhere")
    document = _problem(status, headers, body, "not-found")
    assert (status, document["detail"]) == (404, "no function answers GET /api/nowhere")


def test_a_method_outside_the_functions_methods_is_a_404_problem(
    sample_host: SampleHost, function_key: str
) -> None:
    status, headers, body = http("GET", f"{sample_host.base_url}/api/items/5?code={function_key}")
    assert status == 404  # as the Functions host: the route does not match
    document = _problem(404, headers, body, "not-found")
    assert function_key not in document["detail"]


def test_a_missing_key_is_a_401_problem(sample_host: SampleHost) -> None:
    status, headers, body = http("POST", f"{sample_host.base_url}/api/items/7", b"x")
    document = _problem(status, headers, body, "unauthorized")
    assert status == 401
    assert "function key" in document["detail"]
    status, headers, body = http("GET", f"{sample_host.base_url}/admin/host/status")
    assert "master key" in _problem(status, headers, body, "unauthorized")["detail"]


def test_a_failed_function_is_a_500_problem(sample_host: SampleHost) -> None:
    status, headers, body = http("GET", f"{sample_host.base_url}/api/fail")
    assert status == 500
    assert "fail" in _problem(500, headers, body, "function-failed")["detail"]


def test_webhook_refusals_are_problems(sample_host: SampleHost) -> None:
    base = f"{sample_host.base_url}/runtime/webhooks"
    status, headers, body = http("POST", f"{base}/eventgrid?functionName=on_event", b"[]")
    assert status == 401
    _problem(401, headers, body, "unauthorized")
    status, headers, body = http("GET", f"{base}/unknown")
    assert status == 404
    _problem(404, headers, body, "not-found")
    key = sample_host.keys["systemKeys"]["eventgrid_extension"]
    status, headers, body = http("GET", f"{base}/eventgrid?functionName=on_event&code={key}")
    assert (status, headers["allow"]) == (405, ["POST, OPTIONS"])
    _problem(405, headers, body, "method-not-allowed")
    status, headers, body = http("POST", f"{base}/eventgrid?functionName=nope&code={key}", b"[]")
    assert status == 404
    _problem(404, headers, body, "not-found")


def test_the_connection_serves_the_next_request_after_a_host_error(
    sample_host: SampleHost,
) -> None:
    """A refusal that read the whole request leaves a keep-alive connection usable."""
    two_requests = (
        b"GET /api/nowhere HTTP/1.1\r\nHost: local\r\n\r\n"
        b"GET /api/hello/ada HTTP/1.1\r\nHost: local\r\nConnection: close\r\n\r\n"
    )
    address = urlsplit(sample_host.base_url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as connection:
        connection.sendall(two_requests)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
    assert received.count(b"HTTP/1.1 ") == 2
    assert received.startswith(b"HTTP/1.1 404 ")
    assert b"HTTP/1.1 200 " in received
