"""The one JSON parser of every door: what the fuzzer found crashing, now a clear 400/413."""

from __future__ import annotations

import pytest

from shared.bounded_json import MAX_JSON_DEPTH, InvalidJson, check_document, parse_json
from shared.errors import PayloadTooLarge


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_ordinary_documents_parse() -> None:
    assert parse_json(b'{"a": [1, 2.5, "x", null, true]}', max_bytes=100) == {
        "a": [1, 2.5, "x", None, True]
    }
    assert parse_json(nested(MAX_JSON_DEPTH), max_bytes=1000) is not None
    assert parse_json('"caf\\u00e9 \\ud83d\\ude00"', max_bytes=100) == "café 😀"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (nested(1000), "nested more than 32 levels"),
        ('{"a":' * 1000 + "1" + "}" * 1000, "nested more than 32 levels"),
        (nested(MAX_JSON_DEPTH + 1), "nested more than 32 levels"),
        ('{"parameters": ' + '{"p":' * 300 + "1" + "}" * 301, "nested more than 32 levels"),
        ('{"id": "\\ud800"}', "lone UTF-16 surrogate"),
        ('{"\\udfff": 1}', "lone UTF-16 surrogate"),
        ("[NaN]", "NaN is not a JSON number"),
        ('{"x": Infinity}', "Infinity is not a JSON number"),
        ("1" * 5000, "digits"),
        ("{not json", "Expecting property name"),
        ("", "Expecting value"),
    ],
)
def test_what_would_crash_a_door_is_invalid_json(text: str, words: str) -> None:
    with pytest.raises(InvalidJson, match=words) as refused:
        parse_json(text.encode(), max_bytes=1_000_000, what="the body")
    assert refused.value.fields[0].field == "body"
    assert str(refused.value).startswith("the body is not valid JSON")


def test_bytes_that_are_not_utf8_are_invalid_json() -> None:
    with pytest.raises(InvalidJson, match="utf-8"):
        parse_json(b'{"a": "\xff"}', max_bytes=100)


def test_a_document_over_the_size_limit_is_too_large_before_parsing() -> None:
    with pytest.raises(PayloadTooLarge, match="11 bytes; the limit is 10") as refused:
        parse_json(b'"123456789"', max_bytes=10, what="the delivery", field="events")
    assert refused.value.fields[0].field == "events"


def test_a_document_parsed_elsewhere_gets_the_same_checks() -> None:
    check_document({"a": [{"b": 1}]})
    with pytest.raises(InvalidJson, match="nested more than 3"):
        check_document({"a": [{"b": [1]}]}, max_depth=3)
    with pytest.raises(InvalidJson, match="surrogate"):
        check_document({"id": "x\udc80"}, what="the event")
