"""The one JSON parser of every door: bounded in size and depth, strict about what it takes.

``json.loads`` alone lets a caller crash the app with input it sent: a document nested
a thousand deep raises ``RecursionError`` (a 500, and a poison delivery Event Grid
retries for a day), one nested a few hundred deep parses but breaks pydantic's
serialization later, a lone surrogate escape (``"\\ud800"``) parses into a string that
cannot be encoded as UTF-8 (a dedupe key, a blob name), ``NaN`` and ``Infinity`` are not
JSON at all, and an integer of more than 4,300 digits raises ``ValueError``. Every door
(the request API, the Event Grid webhook, the client principal header, the processor's
message parsing) reads JSON through ``parse_json``, which turns each of those into
``InvalidJson`` (HTTP 400) or ``PayloadTooLarge`` (413) before anything else runs.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from shared.errors import FieldError, InvalidInput, PayloadTooLarge

# Deep enough for every contract (an Event Grid BlobCreated event is five levels deep, a
# request body with its parameters about six), far below Python's recursion limit and
# pydantic's serialization depth.
MAX_JSON_DEPTH: Final = 32
# The largest message body a Service Bus queue delivers (Premium: 100 MB; the app's own
# messages stay under 256 KB, a direct producer's inline text included).
MAX_MESSAGE_JSON_BYTES: Final = 100 * 1024 * 1024
# A surrogate can only come from a \u escape: UTF-8 decoding never yields one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


class InvalidJson(InvalidInput):
    """The text is not JSON the app accepts (malformed, too deep, lone surrogates...)."""

    code = "invalid_json"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _depth_and_strings(document: Any, max_depth: int, check_strings: bool) -> None:
    """Walk the document without recursion; raise on depth or (when asked) lone surrogates."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            if depth > max_depth:
                raise ValueError(f"it is nested more than {max_depth} levels deep")
            for key, item in value.items():
                if check_strings and _LONE_SURROGATE.search(key):
                    raise ValueError("an object key holds a lone UTF-16 surrogate")
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            if depth > max_depth:
                raise ValueError(f"it is nested more than {max_depth} levels deep")
            stack.extend((item, depth + 1) for item in value)
        elif check_strings and isinstance(value, str) and _LONE_SURROGATE.search(value):
            raise ValueError("a string holds a lone UTF-16 surrogate")


def check_document(
    document: Any,
    *,
    max_depth: int = MAX_JSON_DEPTH,
    what: str = "the document",
    field: str = "body",
) -> None:
    """The same depth and string checks for a document someone else parsed (an SDK's)."""
    try:
        _depth_and_strings(document, max_depth, check_strings=True)
    except ValueError as error:
        raise InvalidJson(
            f"{what} is not valid JSON: {error}", (FieldError(field, str(error)),)
        ) from error


def parse_json(
    data: bytes | str,
    *,
    max_bytes: int,
    max_depth: int = MAX_JSON_DEPTH,
    what: str = "the body",
    field: str = "body",
) -> Any:
    """The JSON document in ``data`` (UTF-8), or InvalidJson / PayloadTooLarge naming
    ``what`` and the failing ``field``; never any other exception."""
    size = len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else len(data)
    if size > max_bytes:
        raise PayloadTooLarge(
            f"{what} is {size} bytes; the limit is {max_bytes}",
            (FieldError(field, "too large"),),
        )
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        document = json.loads(text, parse_constant=_reject_constant)
        _depth_and_strings(document, max_depth, bool(_SURROGATE_ESCAPE.search(text)))
    except RecursionError:
        raise InvalidJson(
            f"{what} is not valid JSON: it is nested more than {max_depth} levels deep",
            (FieldError(field, "nested too deep"),),
        ) from None
    except (UnicodeError, ValueError) as error:  # JSONDecodeError is a ValueError
        raise InvalidJson(
            f"{what} is not valid JSON: {error}", (FieldError(field, str(error)),)
        ) from error
    return document
