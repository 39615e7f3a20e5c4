"""Chat completions through the real ``openai`` SDK (Azure and v1 routes), and the
per-deployment quota with the service's 429s and rate-limit headers.

The quota's arithmetic is checked on ``ChatService`` with a clock the test moves; what a
client sees of it (statuses, headers, the SDK's errors) on the running emulator. Each test
names deployments of its own: the emulator is shared by the session.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, cast

import openai
import pytest
from openai import AzureOpenAI, OpenAI
from openai.types.chat import ChatCompletionMessageParam
from openai.types.shared_params import ResponseFormatJSONSchema

from openai_emulator.chat import (
    WINDOW_SECONDS,
    ChatService,
    Limiter,
    parse_quota,
    quota_fields,
    requested_tokens,
)
from openai_emulator.errors import ApiError
from openai_emulator.process import OpenAIEmulator, OpenAIEmulatorProcess

SENTIMENT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["sentiment", "score", "summary", "labels"],
    "properties": {
        "sentiment": {"enum": ["positive", "negative"]},
        "score": {"type": "number", "minimum": -1, "maximum": 1},
        "summary": {"type": "string", "maxLength": 12},
        "labels": {"type": "array", "items": {"$ref": "#/$defs/label"}, "minItems": 2},
    },
    "$defs": {"label": {"type": "integer", "minimum": 3}},
}


def deployment() -> str:
    return f"chat-{uuid.uuid4().hex[:8]}"


def messages(text: str) -> list[ChatCompletionMessageParam]:
    return [{"role": "system", "content": "Rate it."}, {"role": "user", "content": text}]


def schema_format(schema: dict[str, Any]) -> ResponseFormatJSONSchema:
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}


def test_the_azure_route_answers_a_value_of_the_requested_schema(client: AzureOpenAI) -> None:
    name = deployment()
    answer = client.chat.completions.create(
        model=name,
        messages=messages("Great service. It was fast."),
        response_format=schema_format(SENTIMENT),
    )

    assert answer.model == name
    choice = answer.choices[0]
    assert choice.finish_reason == "stop"
    assert json.loads(choice.message.content or "") == {
        "sentiment": "positive",
        "score": 0.0,
        "summary": "Great servic",
        "labels": [3, 3],
    }
    assert answer.usage is not None
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens


def test_the_v1_route_serves_an_openai_compatible_client(emulator: OpenAIEmulator) -> None:
    client = OpenAI(base_url=emulator.v1_base_url, api_key="any-bearer-key", max_retries=0)

    answer = client.chat.completions.create(
        model=deployment(),
        messages=messages("Invoice 7 is due. Pay soon."),
    )

    content = json.loads(answer.choices[0].message.content or "")
    assert content["summary"] == "Invoice 7 is due.", "without a schema: a document analysis"
    assert content["document_type"] == "other"


@pytest.mark.parametrize(
    ("marker", "error"),
    [("[[refuse-prompt]]", openai.BadRequestError), ("[[fail-line]]", openai.InternalServerError)],
)
def test_markers_choose_the_services_failures(
    client: AzureOpenAI, marker: str, error: type[Exception]
) -> None:
    with pytest.raises(error) as failed:
        client.chat.completions.create(model=deployment(), messages=messages(f"x {marker}"))
    if marker == "[[refuse-prompt]]":
        assert getattr(failed.value, "code", None) == "content_filter"


def test_a_filtered_answer_and_an_answer_that_breaks_its_schema(client: AzureOpenAI) -> None:
    filtered = client.chat.completions.create(
        model=deployment(),
        messages=messages("[[refuse-answer]]"),
    )
    assert filtered.choices[0].finish_reason == "content_filter"
    assert filtered.choices[0].message.content is None
    invalid = client.chat.completions.create(
        model=deployment(),
        messages=messages("[[invalid-answer]]"),
        response_format=schema_format(SENTIMENT),
    )
    assert json.loads(invalid.choices[0].message.content or "") == {"unexpected": True}


def test_the_azure_route_needs_an_api_version_and_a_key(emulator: OpenAIEmulator) -> None:
    body = messages("x")
    with pytest.raises(openai.AuthenticationError):
        AzureOpenAI(
            azure_endpoint=emulator.endpoint,
            api_key="wrong",
            api_version="2024-10-21",
            max_retries=0,
        ).chat.completions.create(model="d", messages=body)
    unversioned = OpenAI(
        base_url=f"{emulator.endpoint}/openai/deployments/d", api_key="k", max_retries=0
    )
    with pytest.raises(openai.BadRequestError, match="api-version"):
        unversioned.chat.completions.create(model="d", messages=body)


# --- the quota, on the service with a clock of the test's --------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def body(text: str = "x" * 400, max_tokens: int = 100) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}


def test_a_request_counts_its_prompt_and_its_max_tokens_before_it_is_answered() -> None:
    assert requested_tokens(body()) == 100 + 100
    assert requested_tokens({"messages": [{"role": "user", "content": "abcd"}]}) == 1 + 256


def test_the_token_quota_is_a_window_of_the_minute_and_refills_at_its_rate() -> None:
    clock = Clock()
    chat = ChatService(clock=clock, sleep=lambda _: None)
    chat.configure("d", tokens_per_minute=12_000)  # a 10 s window holds 2,000 tokens
    answered = [chat.complete("d", body()) for _ in range(12)]  # about 200 tokens each

    statuses = [a.status for a in answered]
    assert statuses.count(200) >= 10, "the window's 2,000 tokens, corrected to the answers"
    throttled = next(a for a in answered if a.status == 429)
    assert throttled.body["error"]["code"] == "429"
    wait_ms = int(throttled.headers["retry-after-ms"])
    assert 0 < wait_ms <= 1_000, "200 tokens come back in a second at 12,000 a minute"
    assert throttled.headers["retry-after"] == "1"
    assert int(throttled.headers["x-ratelimit-remaining-tokens"]) < 1_200
    clock.now += wait_ms / 1000
    assert chat.complete("d", body()).status == 200, "the wait it asked for was enough"
    stats = chat.stats()["deployments"]["d"]
    assert stats["throttled"] == statuses.count(429)
    assert stats["served"] == statuses.count(200) + 1
    assert stats["tokens_per_minute"] == 12_000


def test_the_request_quota_limits_calls_whatever_their_size() -> None:
    clock = Clock()
    chat = ChatService(clock=clock, sleep=lambda _: None)
    chat.configure("d", requests_per_minute=60)  # 10 a window, one a second after
    statuses = [chat.complete("d", body("hi", 1)).status for _ in range(11)]
    assert statuses == [200] * 10 + [429]
    answered = chat.complete("d", body("hi", 1))
    assert answered.headers["x-ratelimit-remaining-requests"] == "0"
    clock.now += 1.0
    assert chat.complete("d", body("hi", 1)).status == 200


def test_a_deployment_without_a_quota_is_not_limited_and_reports_no_headers() -> None:
    chat = ChatService(clock=Clock(), sleep=lambda _: None)
    answered = [chat.complete("free", body()) for _ in range(50)]
    assert {a.status for a in answered} == {200}
    assert "x-ratelimit-remaining-tokens" not in answered[0].headers
    assert chat.stats()["deployments"]["free"]["served"] == 50


def test_a_request_larger_than_the_window_is_let_through_when_it_is_full() -> None:
    clock = Clock()
    chat = ChatService(clock=clock, sleep=lambda _: None)
    chat.configure("d", tokens_per_minute=600)  # a 100-token window
    assert chat.complete("d", body(max_tokens=500)).status == 200
    throttled = chat.complete("d", body(max_tokens=10))
    assert throttled.status == 429, "its debt is paid before the next request"
    clock.now += WINDOW_SECONDS * 10
    assert chat.complete("d", body(max_tokens=10)).status == 200


def test_latency_is_a_deployments_own() -> None:
    slept: list[float] = []
    chat = ChatService(clock=Clock(), sleep=slept.append)
    chat.configure("slow", latency_ms=750)
    chat.complete("slow", body())
    chat.complete("fast", body())
    assert slept == [0.75]


# --- the quota as a client sees it ------------------------------------------------------------


def test_a_throttled_client_gets_the_services_429_and_headers(emulator: OpenAIEmulator) -> None:
    name = deployment()
    emulator.set_deployment(name, tokens_per_minute=6_000, requests_per_minute=600)
    client = AzureOpenAI(
        azure_endpoint=emulator.endpoint,
        api_key=emulator.api_key,
        api_version="2024-10-21",
        max_retries=0,
    )
    raw = client.chat.completions.with_raw_response.create(
        model=name,
        messages=messages("hello"),
        max_tokens=10,
    )
    assert int(raw.headers["x-ratelimit-remaining-tokens"]) > 0
    assert int(raw.headers["x-ratelimit-remaining-requests"]) >= 0
    throttled: openai.RateLimitError | None = None
    for _ in range(20):  # a thousand-token window: the third of these is too many
        try:
            client.chat.completions.create(
                model=name,
                messages=messages("hello"),
                max_tokens=500,
            )
        except openai.RateLimitError as error:
            throttled = error
            break
    assert throttled is not None, "the quota never answered 429"
    headers = throttled.response.headers
    assert int(headers["retry-after-ms"]) > 0
    assert int(headers["retry-after"]) >= 1
    stats = emulator.chat_stats()["deployments"][name]
    assert stats["throttled"] == 1
    assert stats["served"] >= 1


def test_quotas_can_be_given_when_the_emulator_starts(tmp_path: Any) -> None:
    process = OpenAIEmulatorProcess(
        tmp_path / "emulator.log", deployments=(("gpt-4o-mini", 30_000, 180, 0),)
    )
    try:
        started = process.wait_ready()
        assert started.chat_stats()["deployments"]["gpt-4o-mini"]["tokens_per_minute"] == 30_000
        assert "deployments=gpt-4o-mini=30000tpm/180rpm/0ms" in process.child.output()
    finally:
        process.stop()


# --- the sliding minute, a deployment's other limiter ---------------------------------------


def test_a_quota_may_name_its_limiter_after_its_latency() -> None:
    assert parse_quota("d=24000,144,800") == ("d", 24_000, 144, 800), "as before: a 4-tuple"
    assert parse_quota("d=24000,144,800,window") == ("d", 24_000, 144, 800)
    assert parse_quota("d=60000,,,minute") == ("d", 60_000, None, 0, "minute")
    assert parse_quota("d=,60,5, Minute ") == ("d", None, 60, 5, "minute")
    assert quota_fields(("d", 1, 2, 3)) == ("d", 1, 2, 3, "window")
    assert quota_fields(parse_quota("d=1,2,3,minute")) == ("d", 1, 2, 3, "minute")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("d=1,2,3,hourly", "LIMITER is window or minute, got 'hourly'"),
        ("d=1,2,3,minute,4", "DEPLOYMENT=TPM[,RPM[,LATENCY_MS[,LIMITER]]]: "),
        ("d=1,2,x,minute", "in whole numbers"),
        ("d=-1,,,minute", "(negative)"),
        ("minute", "DEPLOYMENT=TPM"),
    ],
)
def test_a_quota_with_another_limiter_or_more_fields_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse_quota(text)


@pytest.mark.parametrize(("limiter", "burst"), [("window", 10), ("minute", 60)])
def test_the_sliding_minute_takes_the_whole_minute_at_once_where_the_window_takes_a_sixth(
    limiter: Limiter, burst: int
) -> None:
    chat = ChatService(clock=Clock(), sleep=lambda _: None)
    chat.configure("d", requests_per_minute=60, limiter=limiter)
    statuses = [chat.complete("d", body("hi", 1)).status for _ in range(61)]
    assert statuses == [200] * burst + [429] * (61 - burst)
    assert chat.stats()["deployments"]["d"]["limiter"] == limiter


def test_the_sliding_minute_waits_until_its_oldest_admissions_leave_it() -> None:
    clock = Clock()
    chat = ChatService(clock=clock, sleep=lambda _: None)
    chat.configure("d", requests_per_minute=60, limiter="minute")
    started = clock.now
    answered = [chat.complete("d", body("hi", 1)) for _ in range(30)]
    assert answered[-1].headers["x-ratelimit-remaining-requests"] == "30"
    clock.now = started + 20
    assert {chat.complete("d", body("hi", 1)).status for _ in range(30)} == {200}
    clock.now = started + 30
    throttled = chat.complete("d", body("hi", 1))
    assert throttled.status == 429
    assert throttled.body["error"]["code"] == "429"
    assert "retry after 30 seconds" in throttled.body["error"]["message"]
    assert throttled.headers["retry-after-ms"] == "30000", "the first 30 leave at +60 s"
    assert throttled.headers["retry-after"] == "30"
    assert throttled.headers["x-ratelimit-remaining-requests"] == "0"
    clock.now = started + 59.5
    assert chat.complete("d", body("hi", 1)).headers["retry-after-ms"] == "500"
    clock.now = started + 60
    first = chat.complete("d", body("hi", 1))
    assert first.status == 200, "the wait it asked for was enough"
    assert first.headers["x-ratelimit-remaining-requests"] == "29", "30 left, 1 taken"
    assert {chat.complete("d", body("hi", 1)).status for _ in range(29)} == {200}
    again = chat.complete("d", body("hi", 1))
    assert again.headers["retry-after-ms"] == "20000", "then the 30 of +20 s, at +80 s"
    stats = chat.stats()["deployments"]["d"]
    assert (stats["served"], stats["throttled"]) == (90, 3)


def test_the_sliding_minute_counts_the_tokens_of_the_answer_once_it_is_given() -> None:
    clock = Clock()
    chat = ChatService(clock=clock, sleep=lambda _: None)
    chat.configure("d", tokens_per_minute=1_000, limiter="minute")
    assert requested_tokens(body(max_tokens=700)) == 800
    first = chat.complete("d", body(max_tokens=700))
    used = first.body["usage"]["total_tokens"]
    assert used < 200
    assert first.headers["x-ratelimit-remaining-tokens"] == str(1_000 - used)
    clock.now += 10
    second = chat.complete("d", body(max_tokens=700))
    assert second.status == 200, "800 more fit because the first counts its answer, not 800"
    second_used = second.body["usage"]["total_tokens"]
    used += second_used
    assert second.headers["x-ratelimit-remaining-tokens"] == str(1_000 - used)
    clock.now += 10
    third = chat.complete("d", body(max_tokens=700))
    assert third.status == 429
    assert third.headers["retry-after-ms"] == "40000", "until the first leaves the minute"
    assert third.headers["x-ratelimit-remaining-tokens"] == str(1_000 - used)
    clock.now += 40
    longer = chat.complete("d", body("hi", 1))  # 2 tokens estimated, more answered
    answered = longer.body["usage"]["total_tokens"]
    assert answered > requested_tokens(body("hi", 1))
    left = 1_000 - second_used - answered  # the first left the minute, the second has not
    assert longer.headers["x-ratelimit-remaining-tokens"] == str(left)


def test_a_request_larger_than_the_minute_is_let_through_when_the_minute_is_empty() -> None:
    clock = Clock()
    chat = ChatService(clock=clock, sleep=lambda _: None)
    chat.configure("d", tokens_per_minute=600, limiter="minute")
    large = body("x" * 4_000, 10)  # over 1,000 tokens, asked and answered
    assert chat.complete("d", large).status == 200
    clock.now += 30
    throttled = chat.complete("d", body(max_tokens=10))
    assert throttled.status == 429, "it counts in full until it leaves the minute"
    assert throttled.headers["retry-after-ms"] == "30000"
    assert throttled.headers["x-ratelimit-remaining-tokens"] == "0"
    clock.now += 30
    assert chat.complete("d", body(max_tokens=10)).status == 200
    refused = chat.complete("d", large)
    assert refused.status == 429, "a large one waits for the whole minute to be free"
    assert refused.headers["retry-after-ms"] == "60000"


def test_a_limiter_is_window_unless_told_and_nothing_else() -> None:
    chat = ChatService(clock=Clock(), sleep=lambda _: None)
    assert chat.configure("d", 6_000)["limiter"] == "window"
    assert chat.configure("m", 6_000, limiter="minute")["limiter"] == "minute"
    with pytest.raises(ApiError) as refused:
        chat.configure("h", 6_000, limiter=cast(Any, "hourly"))
    assert refused.value.status == 400
    assert "limiter" in refused.value.message


def test_a_client_of_a_sliding_minute_gets_its_whole_minute_then_a_429(
    emulator: OpenAIEmulator,
) -> None:
    name = deployment()
    configured = emulator.set_deployment(name, requests_per_minute=6, limiter="minute")
    assert configured["limiter"] == "minute"
    client = AzureOpenAI(
        azure_endpoint=emulator.endpoint,
        api_key=emulator.api_key,
        api_version="2024-10-21",
        max_retries=0,
    )
    for left in range(5, -1, -1):  # a 10-second window would take one of the six
        raw = client.chat.completions.with_raw_response.create(
            model=name, messages=messages("hello"), max_tokens=10
        )
        assert raw.headers["x-ratelimit-remaining-requests"] == str(left)
    with pytest.raises(openai.RateLimitError) as throttled:
        client.chat.completions.create(model=name, messages=messages("hello"), max_tokens=10)
    assert 50_000 < int(throttled.value.response.headers["retry-after-ms"]) <= 60_000
    stats = emulator.chat_stats()["deployments"][name]
    assert (stats["limiter"], stats["served"], stats["throttled"]) == ("minute", 6, 1)


def test_a_quota_given_at_start_names_its_limiter(tmp_path: Any) -> None:
    process = OpenAIEmulatorProcess(
        tmp_path / "emulator.log",
        deployments=(("azure", 30_000, 180, 0), ("compatible", None, 60, 5, "minute")),
    )
    try:
        started = process.wait_ready()
        stats = started.chat_stats()["deployments"]
        assert (stats["azure"]["limiter"], stats["compatible"]["limiter"]) == ("window", "minute")
        assert stats["compatible"]["requests_per_minute"] == 60
        assert (
            "deployments=azure=30000tpm/180rpm/0ms/window,compatible=-tpm/60rpm/5ms/minute"
            in process.child.output()
        )
    finally:
        process.stop()


# --- a reasoning deployment refuses what the service refuses -------------------------------


def test_a_reasoning_deployment_refuses_a_temperature_other_than_the_default() -> None:
    chat = ChatService(sleep=lambda _: None)
    request = {"messages": [{"role": "user", "content": "x"}], "temperature": 0.0}
    with pytest.raises(ApiError) as refused:
        chat.complete("gpt-5.1", request)
    assert refused.value.status == 400
    assert refused.value.body_json()["error"] == {
        "code": "unsupported_value",
        "message": "Unsupported value: 'temperature' does not support 0.0 with this model. "
        "Only the default (1) value is supported.",
        "param": "temperature",
        "type": "invalid_request_error",
    }
    assert chat.complete("gpt-5.1", {**request, "temperature": 1}).status == 200
    assert chat.complete("gpt-4o-mini", request).status == 200, "not a reasoning deployment"


@pytest.mark.parametrize("name", ["gpt-5-mini", "GPT-5.1", "o1", "o3-mini", "o4-mini"])
def test_a_reasoning_deployment_refuses_max_tokens_and_takes_max_completion_tokens(
    name: str,
) -> None:
    chat = ChatService(sleep=lambda _: None)
    with pytest.raises(ApiError) as refused:
        chat.complete(name, body(max_tokens=10))
    error = refused.value.body_json()["error"]
    assert (refused.value.status, error["code"], error["param"]) == (
        400,
        "unsupported_parameter",
        "max_tokens",
    )
    assert "max_completion_tokens" in error["message"]
    allowed = {"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 10}
    assert chat.complete(name, allowed).status == 200
    assert chat.stats()["deployments"][name]["served"] == 1, "a refusal is not served"


def test_the_sdk_sees_a_reasoning_deployments_refusal_with_its_param(
    emulator: OpenAIEmulator,
) -> None:
    name = f"gpt-5-{deployment()}"
    client = AzureOpenAI(
        azure_endpoint=emulator.endpoint,
        api_key=emulator.api_key,
        api_version="2024-10-21",
        max_retries=0,
    )
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=name, messages=messages("hi"), temperature=0)
    assert refused.value.code == "unsupported_value"
    assert refused.value.param == "temperature"
    v1 = OpenAI(base_url=emulator.v1_base_url, api_key=emulator.api_key, max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused_v1:
        v1.chat.completions.create(model=name, messages=messages("hi"), max_tokens=5)
    assert refused_v1.value.code == "unsupported_parameter"
    answered = v1.chat.completions.create(
        model=name, messages=messages("hi"), max_completion_tokens=5
    )
    assert answered.choices[0].message is not None
