"""What the fuzzer sends to the request API (the webhook's deliveries are in
``event_strategies.py``): mostly well-formed requests with one thing wrong, and the odd
shapes a careless or hostile caller sends (deep nesting, huge and strange strings, lone
surrogates, invalid UTF-8, non-base64 ``data_base64``, wrong types, odd headers).

Well-formed-but-one-thing-wrong matters most: an arbitrary blob of bytes is refused at
the first check, while a nearly valid request reaches the deep code paths.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

TENANTS = ["fuzz-tenant", "fuzz.tenant_2", "A", "x" * 128]


@dataclass(frozen=True)
class Call:
    """One HTTP request to send: ``tenant`` is the tenant it speaks for (None: not said)."""

    method: str
    path: str
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        """Short enough to read in a failure report: long values are cut, with their size."""

        def cut(value: str | bytes, limit: int = 300) -> str:
            return repr(value[:limit]) + (f"...({len(value)} long)" if len(value) > limit else "")

        headers = {name: cut(value) for name, value in self.headers.items()}
        body = cut(self.body, 1500) if self.body is not None else None
        return f"Call({self.method} {cut(self.path)}, headers={headers}, body={body})"


# --- building blocks ------------------------------------------------------------------

# Header values: what an HTTP client can send at all (latin-1, no control characters).
header_text = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"), max_size=300
)
odd_text = st.one_of(
    st.text(max_size=50),
    st.text(st.characters(codec="utf-8"), min_size=1000, max_size=5000),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "\ud800",
            "\udfff",
            "a\ud83dz",
            "\u202e",
            "💥" * 50,
            "null",
            "../../etc",
            "%2F",
            "' OR 1=1 --",
            "{}",
            "[]",
        ]
    ),
    st.builds(lambda n: "x" * n, st.integers(270_000, 300_000)),
)


def json_values(strings: st.SearchStrategy[str]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), strings),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)
        ),
        max_leaves=12,
    )


json_value = json_values(odd_text)
# Headers stay within what a front end lets through (App Service caps request headers;
# the local host answers 431 beyond 64 KiB): no huge strings inside a client principal.
small_json_value = json_values(st.text(max_size=50))


def deeply_nested(depth: int) -> bytes:
    return b'{"model":"local-analyzer","input":' + b"[" * depth + b"]" * depth + b"}"


def encode(document: Any) -> bytes:
    """JSON with ``ensure_ascii``: lone surrogates become ``\\ud800`` escapes, valid JSON."""
    return json.dumps(document, ensure_ascii=True, allow_nan=True).encode()


raw_body = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"", b"{", b"\xff\xfe{}", b'{"a":1}{"b":2}', b"[" * 10, b"NaN", b'"\\ud800"']),
    st.integers(100, 100_000).map(deeply_nested),
    st.integers(1, 20).map(lambda n: b'{"input":{"text":"' + b"x" * (n * 100_000) + b'"}}'),
)


def mutated(valid: dict[str, Any], extra_keys: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """``valid`` with one key dropped, changed to any JSON value, or an extra key added."""
    keys = sorted(valid) + extra_keys
    return st.one_of(
        st.just(valid),
        st.sampled_from(sorted(valid)).map(lambda k: {x: v for x, v in valid.items() if x != k}),
        st.tuples(st.sampled_from(keys), json_value).map(lambda kv: {**valid, kv[0]: kv[1]}),
    )


# --- the request API --------------------------------------------------------------------


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``good`` three times in four, else ``bad``: most examples get past the first check."""
    return st.integers(0, 3).flatmap(lambda n: bad if n == 0 else good)


OPTIONAL_FIELDS = [
    "parameters",
    "priority",
    "not_before",
    "deadline_seconds",
    "metadata",
    "document_id",
    "after",
    "mode",
]


@st.composite
def submit_document(draw: st.DrawFn) -> dict[str, Any]:
    # Due soon or already: an accepted request must end within the run (the message check).
    later = (datetime.now(UTC) + timedelta(seconds=draw(st.integers(-60, 15)))).isoformat()
    text = st.just("Invoice 1. Amount due: 5 EUR. Pay within 14 days.")
    valid: dict[str, Any] = {
        "model": draw(
            mostly(st.just("local-analyzer"), st.sampled_from(["gpt-4o", "", "LOCAL-ANALYZER"]))
        ),
        "input": draw(
            mostly(
                st.fixed_dictionaries({"text": st.one_of(text, st.text(min_size=1, max_size=200))}),
                st.one_of(
                    st.fixed_dictionaries({"text": odd_text}),
                    st.fixed_dictionaries({"blob_uri": odd_text}, optional={"sha256": odd_text}),
                ),
            )
        ),
        "parameters": draw(
            mostly(
                st.fixed_dictionaries({}, optional={"summary_sentences": st.integers(1, 5)}),
                st.one_of(
                    st.dictionaries(
                        st.sampled_from(
                            ["summary_sentences", "temperature", "simulate", "max_tokens", "x"]
                        ),
                        json_value,
                        max_size=3,
                    ),
                    st.dictionaries(st.text(max_size=5), st.integers(), min_size=33, max_size=40),
                ),
            )
        ),
        "priority": draw(mostly(st.sampled_from(["normal", "high"]), st.sampled_from(["x", 1]))),
        "not_before": draw(mostly(st.just(later), st.sampled_from([later[:19], "yesterday"]))),
        "deadline_seconds": draw(
            mostly(st.integers(1, 86_400), st.one_of(st.integers(-5, 0), st.just("60")))
        ),
        "metadata": draw(
            mostly(
                st.dictionaries(
                    st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True),
                    st.text(max_size=30),
                    max_size=3,
                ),
                st.dictionaries(st.text(max_size=70), json_value, max_size=3),
            )
        ),
        "document_id": draw(mostly(st.just("doc-1"), odd_text)),
        "after": draw(mostly(st.uuids().map(str), odd_text)),
        "mode": draw(mostly(st.sampled_from(["queue", "batch"]), st.sampled_from(["BATCH", 1]))),
    }
    keep = draw(st.sets(st.sampled_from(OPTIONAL_FIELDS), max_size=3))
    document = {k: v for k, v in valid.items() if k in ("model", "input") or k in keep}
    return draw(mostly(st.just(document), mutated(document, ["schema", "tenant_id"])))


@st.composite
def identity_headers(draw: st.DrawFn) -> dict[str, str]:
    """Who is calling: a tenant header, a client principal (valid, odd or not base64), both
    or neither; sometimes an Idempotency-Key or a traceparent."""
    headers: dict[str, str] = {}
    if draw(st.integers(0, 9)):
        headers["X-Tenant-Id"] = draw(mostly(st.sampled_from(TENANTS), header_text))
    if draw(st.integers(0, 5)) == 0:
        claims = draw(
            st.one_of(
                st.just([{"typ": "tid", "val": "fuzz-tenant"}]),
                st.lists(
                    st.fixed_dictionaries({"typ": st.text(max_size=20), "val": small_json_value}),
                    max_size=3,
                ),
                small_json_value,
            )
        )
        principal = base64.b64encode(encode({"claims": claims})).decode()
        headers["x-ms-client-principal"] = draw(
            mostly(st.just(principal), st.one_of(header_text, st.sampled_from(["e30=", "!!x"])))
        )
    if draw(st.booleans()):
        headers["Idempotency-Key"] = draw(st.one_of(st.just("fuzz-key-1"), header_text))
    if draw(st.integers(0, 4)) == 0:
        headers["traceparent"] = draw(
            st.one_of(st.just("00-" + "a" * 32 + "-" + "b" * 16 + "-01"), header_text)
        )
    return headers


content_types = st.sampled_from(
    [
        "application/json",
        "application/json; charset=utf-8",
        "APPLICATION/JSON",
        "text/plain",
        "application/octet-stream",
        "multipart/form-data; boundary=x",
        "image/png",
        "text/html;x",
        "application/pdf",
        "application/problem+json",
        ";;;",
        "",
    ]
)


@st.composite
def submissions(draw: st.DrawFn) -> Call:
    headers = draw(identity_headers())
    content_type = draw(mostly(st.just("application/json"), content_types))
    if content_type:
        headers["Content-Type"] = content_type
    body = draw(mostly(submit_document().map(encode), raw_body))
    path = "/api/v1/requests"
    if draw(st.integers(0, 3)) == 0:
        query = draw(
            st.sampled_from(
                [
                    "model=local-analyzer",
                    "model=",
                    "priority=high&model=x",
                    "not_before=2020-01-01",
                    "deadline_seconds=-1",
                    "%ZZ",
                ]
            )
        )
        path += "?" + query
    return Call("POST", path, body, headers)


request_ids = st.one_of(
    st.uuids().map(str),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=300),
    st.sampled_from(["..", ".", "%00", "a" * 2000, "00000000-0000-0000-0000-000000000000"]),
)


@st.composite
def lookups(draw: st.DrawFn) -> Call:
    """GET status, GET result or DELETE of a request, GET or DELETE of a Global Batch
    submission, by ids that exist nowhere or are malformed."""
    some_id = quote(draw(request_ids), safe="")
    method, path = draw(
        st.sampled_from(
            [
                ("GET", f"/api/v1/requests/{some_id}"),
                ("GET", f"/api/v1/requests/{some_id}/result"),
                ("DELETE", f"/api/v1/requests/{some_id}"),
                ("GET", f"/api/v1/batches/{some_id}"),
                ("DELETE", f"/api/v1/batches/{some_id}"),
            ]
        )
    )
    return Call(method, path, None, draw(identity_headers()))


@st.composite
def openapi_fetches(draw: st.DrawFn) -> Call:
    """``GET /api/openapi.json`` (anonymous) with odd query strings and headers."""
    query = draw(
        st.one_of(
            st.just(""), st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=40)
        )
    )
    headers = draw(identity_headers())
    if draw(st.booleans()):
        headers["Accept"] = draw(st.one_of(st.just("application/json"), header_text))
    return Call(
        "GET", "/api/openapi.json" + (f"?{quote(query, safe='=&')}" if query else ""), None, headers
    )
