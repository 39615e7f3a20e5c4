"""HTTP triggers through the local host: routes, keys, conversions, async functions."""

from __future__ import annotations

import json

import pytest

from hostproc import SampleHost, http

pytestmark = pytest.mark.integration


def test_anonymous_route_with_parameters(sample_host: SampleHost) -> None:
    status, headers, body = http("GET", f"{sample_host.base_url}/api/hello/ada?x=1&y=two")
    assert status == 200
    assert headers["content-type"] == ["application/json"]
    document = json.loads(body)
    assert document["name"] == "ada"
    assert document["params"] == {"x": "1", "y": "two"}
    assert document["method"] == "GET"
    assert document["url"].endswith("/api/hello/ada?x=1&y=two")


def test_function_level_route_requires_a_key(sample_host: SampleHost, function_key: str) -> None:
    url = f"{sample_host.base_url}/api/items/7"
    assert http("POST", url, b"x")[0] == 401
    assert http("POST", f"{url}?code=wrong", b"x")[0] == 401
    assert http("POST", f"{url}?code={function_key}", b"x")[0] == 201
    assert http("POST", url, b"x", {"x-functions-key": function_key})[0] == 201
    master = sample_host.keys["masterKey"]
    assert http("POST", f"{url}?code={master}", b"x")[0] == 201


def test_request_and_response_round_trip(sample_host: SampleHost, function_key: str) -> None:
    status, headers, body = http(
        "PUT",
        f"{sample_host.base_url}/api/items/42/blue?code={function_key}",
        b"a,b\n1,2\n",
        {"Content-Type": "text/csv", "X-Custom": "hello"},
    )
    assert status == 201
    assert body == b"a,b\n1,2\n"
    assert headers["x-item-id"] == ["42"]
    assert headers["x-label"] == ["blue"]
    assert headers["x-echo-header"] == ["hello"]
    assert headers["set-cookie"] == ["a=1", "b=2"]
    assert headers["content-type"] == ["text/csv; charset=utf-8"]


def test_optional_parameter_constraint_and_methods(
    sample_host: SampleHost, function_key: str
) -> None:
    base = f"{sample_host.base_url}/api/items"
    status, headers, _ = http("POST", f"{base}/5?code={function_key}", b"")
    assert (status, headers["x-label"]) == (201, ["-"])
    assert http("POST", f"{base}/not-a-number?code={function_key}", b"")[0] == 404
    assert http("GET", f"{base}/5?code={function_key}")[0] == 404
    assert http("GET", f"{sample_host.base_url}/api/nowhere")[0] == 404


def test_async_function_gets_a_context(sample_host: SampleHost) -> None:
    status, _, body = http("GET", f"{sample_host.base_url}/api/async/v42")
    assert status == 200
    document = json.loads(body)
    assert document["value"] == "v42"
    assert len(document["invocation_id"]) == 36


def test_each_invocation_is_logged_with_its_outcome(sample_host: SampleHost) -> None:
    assert http("GET", f"{sample_host.base_url}/api/fail")[0] == 500
    assert http("GET", f"{sample_host.base_url}/api/hello/log")[0] == 200
    assert "Executed 'Functions.fail' (Failed, Id=" in sample_host.log()
    assert "Executed 'Functions.hello' (Succeeded, Id=" in sample_host.log()


def test_admin_endpoints(sample_host: SampleHost) -> None:
    assert http("GET", f"{sample_host.base_url}/admin/host/ping")[0] == 200
    assert http("GET", f"{sample_host.base_url}/admin/host/status")[0] == 401
    master = sample_host.keys["masterKey"]
    status, _, body = http("GET", f"{sample_host.base_url}/admin/host/status?code={master}")
    assert status == 200
    assert json.loads(body)["state"] == "Running"
