"""Showing a message to an operator without its secrets: redaction and body previews.

A dead-lettered request can carry what must not reach a terminal or a ticket: a claim
check's SAS token, a credential in a parameter or a description, the document text
itself. ``redact`` masks credential-named fields and credential-looking strings, drops
URLs' query strings and truncates; ``body_preview`` shows a request body without its
input's content. Nothing here knows about Service Bus: the dead-letter operations and
the ``sb-deadletters`` commands use it for descriptions, properties and bodies alike.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

SENSITIVE_WORDS = frozenset(
    "secret secrets password passwd pwd token apikey key sig signature credential credentials"
    " authorization auth sas connectionstring cookie bearer privatekey".split()
)
_CREDENTIAL = re.compile(
    r"(AccountKey|SharedAccessKey|SharedAccessSignature|sig|password|pwd)=[^;&\s\"']+"
    r"|Bearer\s+[\w.~+/=-]+|eyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]*",
    re.IGNORECASE,
)
_URL = re.compile(r"https?://[^\s\"'<>]+")
MAX_TEXT = 200


def is_sensitive_key(key: str) -> bool:
    """``api_key``, ``accountKey``, ``X-Auth-Token``: a word of the name is a credential's."""
    words = re.split(r"[_\-.\s]+|(?<=[a-z0-9])(?=[A-Z])", key)
    joined = key.replace("_", "").replace("-", "").lower()
    return joined in SENSITIVE_WORDS or any(w.lower() in SENSITIVE_WORDS for w in words if w)


def strip_query(url: str) -> str:
    """A URL without its query string and fragment (a SAS token lives there)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def redact_text(text: str, limit: int = MAX_TEXT) -> str:
    cleaned = _URL.sub(lambda m: strip_query(m.group(0)), text)
    cleaned = _CREDENTIAL.sub("***", cleaned)
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def redact(value: Any, depth: int = 0) -> Any:
    """A JSON value with credential-named fields masked, URLs without query strings and
    long strings and collections truncated."""
    if isinstance(value, str):
        return redact_text(value)
    if depth >= 4 and isinstance(value, dict | list):
        return "…"
    if isinstance(value, dict):
        return {
            str(k): "***" if is_sensitive_key(str(k)) else redact(v, depth + 1)
            for k, v in list(value.items())[:32]
        }
    if isinstance(value, list):
        return [redact(v, depth + 1) for v in value[:16]] + (["…"] if len(value) > 16 else [])
    return value


def body_preview(body: bytes) -> Any:
    """What ``show`` prints of a body: the request without its input's content (text as
    its length, a claim check's blob without query string) and without credentials."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return f"<{len(body)} bytes, not JSON> " + redact_text(body.decode("utf-8", "replace"))
    if not isinstance(document, dict):
        return redact(document)
    preview = redact({k: v for k, v in document.items() if k != "input"})
    given = document.get("input")
    if isinstance(given, dict) and isinstance(given.get("text"), str):
        preview["input"] = {"text": f"<{len(given['text'])} characters>"}
    elif isinstance(given, dict) and isinstance(given.get("blob_uri"), str):
        preview["input"] = {**redact(given), "blob_uri": strip_query(given["blob_uri"])}
    elif "input" in document:
        preview["input"] = redact(given)
    return preview
