"""Secrets never reach a log or an operator's terminal: the one place that says what a
credential looks like, and how it is hidden.

For logs: a function key travels in the URL (``?code=``), a SAS token in its ``sig``, and
callers and Event Grid send credentials in headers (``x-functions-key``,
``Authorization``, ``X-Webhook-Secret``, App Service's ``x-ms-client-principal`` and
``x-ms-token-*``). Logs are kept, exported and read by more people than the keys are
meant for, so every URL or header the app logs goes through ``redact_url`` /
``redact_headers`` (or ``redact_text`` for a message that may embed a URL): the value is
replaced, the name stays, so a log line still says which credential was presented.

For operators: a dead-lettered request can carry a claim check's SAS token, a credential
in a parameter or a description, and the document text itself. ``redact`` masks
credential-named fields and credential-looking strings, drops URLs' query strings and
truncates (``mask_credentials`` does it for one text); ``body_preview`` shows a request
body without its input's content.

One vocabulary (``CREDENTIAL_WORDS``) decides what names a credential everywhere: a JSON
field or a header is one when a word of its name is in it; a URL's query parameter, which
logs must never leak, also when its name merely contains a credential's word.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

REDACTED: Final = "***"

# The words that name a credential, in a field, header or parameter name.
CREDENTIAL_WORDS: Final = frozenset(
    "secret secrets password passwd pwd token apikey key sig signature credential credentials"
    " authorization auth sas connectionstring cookie bearer privatekey".split()
)
# Query parameters that carry credentials under names of their own: a Functions key
# (code), a SAS token's signed object and tenant ids, OAuth's tokens and client secret.
_SECRET_QUERY_NAMES: Final = CREDENTIAL_WORDS | frozenset(
    "code api-key api_key client_secret access_token id_token refresh_token skoid sktid".split()
)
# Inside any longer query parameter or header name, these still name a credential.
_SECRET_NAME_PARTS: Final = ("token", "secret", "password", "signature")
_SECRET_HEADERS: Final = frozenset(
    "authorization proxy-authorization cookie set-cookie x-functions-key x-webhook-secret "
    "x-ms-client-principal x-ms-client-principal-id x-ms-client-principal-name aeg-sas-key "
    "aeg-sas-token api-key ocp-apim-subscription-key x-api-key".split()
)
# name=value pairs of a query string, wherever a URL appears in a text.
_QUERY_PAIR = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&#;\s?]+)=(?P<value>[^&#;\s]*)")


def is_sensitive_key(key: str) -> bool:
    """``api_key``, ``accountKey``, ``X-Auth-Token``: a word of the name is a credential's."""
    words = re.split(r"[_\-.\s]+|(?<=[a-z0-9])(?=[A-Z])", key)
    joined = key.replace("_", "").replace("-", "").lower()
    return joined in CREDENTIAL_WORDS or any(w.lower() in CREDENTIAL_WORDS for w in words if w)


def is_secret_parameter(name: str) -> bool:
    """Whether a query parameter of this name carries a credential."""
    lowered = name.lower()
    return (
        lowered in _SECRET_QUERY_NAMES
        or lowered.endswith("key")
        or any(part in lowered for part in _SECRET_NAME_PARTS)
    )


def is_secret_header(name: str) -> bool:
    """Whether a header of this name carries a credential."""
    lowered = name.lower()
    return (
        lowered in _SECRET_HEADERS
        or lowered.startswith("x-ms-token-")
        or any(part in lowered for part in _SECRET_NAME_PARTS)
    )


def _redact_pair(match: re.Match[str]) -> str:
    if not is_secret_parameter(match.group("name")):
        return match.group(0)
    return f"{match.group('lead')}{match.group('name')}={REDACTED}"


def redact_text(text: str) -> str:
    """``text`` with the value of every credential query parameter replaced."""
    if "=" not in text:
        return text
    return _QUERY_PAIR.sub(_redact_pair, text)


def redact_url(url: str) -> str:
    """The URL with credential query parameters (``code``, ``sig``, ``*token*``...) redacted."""
    return redact_text(url)


def redact_headers(
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
) -> dict[str, str]:
    """The headers with credential values replaced (names kept, for the record)."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return {name: REDACTED if is_secret_header(name) else value for name, value in pairs}


# --- for operators: values, texts and bodies -------------------------------------------

_CREDENTIAL_VALUE = re.compile(
    r"(AccountKey|SharedAccessKey|SharedAccessSignature|sig|password|pwd)=[^;&\s\"']+"
    r"|Bearer\s+[\w.~+/=-]+|eyJ[\w-]{8,}\.[\w-]{8,}\.[\w-]*",
    re.IGNORECASE,
)
_URL = re.compile(r"https?://[^\s\"'<>]+")
MAX_TEXT = 200


def strip_query(url: str) -> str:
    """A URL without its query string and fragment (a SAS token lives there)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def mask_credentials(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` for an operator: URLs without query strings, credential-looking values
    (connection-string keys, bearer tokens, JWTs) masked, at most ``limit`` characters."""
    cleaned = _URL.sub(lambda m: strip_query(m.group(0)), text)
    cleaned = _CREDENTIAL_VALUE.sub(REDACTED, cleaned)
    return cleaned if len(cleaned) <= limit else cleaned[: limit - 1] + "…"


def redact(value: Any, depth: int = 0) -> Any:
    """A JSON value with credential-named fields masked, URLs without query strings and
    long strings and collections truncated."""
    if isinstance(value, str):
        return mask_credentials(value)
    if depth >= 4 and isinstance(value, dict | list):
        return "…"
    if isinstance(value, dict):
        return {
            str(k): REDACTED if is_sensitive_key(str(k)) else redact(v, depth + 1)
            for k, v in list(value.items())[:32]
        }
    if isinstance(value, list):
        return [redact(v, depth + 1) for v in value[:16]] + (["…"] if len(value) > 16 else [])
    return value


def body_preview(body: bytes) -> Any:
    """What an operator is shown of a request body: the request without its input's
    content (text as its length, a claim check's blob without query string) and without
    credentials."""
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return f"<{len(body)} bytes, not JSON> " + mask_credentials(body.decode("utf-8", "replace"))
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
