"""Secrets never reach a log: URLs and headers are redacted before they are logged.

A function key travels in the URL (``?code=``), a SAS token in its ``sig``, and callers
and Event Grid send credentials in headers (``x-functions-key``, ``Authorization``,
``X-Webhook-Secret``, App Service's ``x-ms-client-principal`` and ``x-ms-token-*``). Logs
are kept, exported and read by more people than the keys are meant for, so every URL or
header the app logs goes through ``redact_url``/``redact_headers`` (or ``redact_text`` for
a message that may embed a URL): the value is replaced, the name stays, so a log line still
says which credential was presented.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

REDACTED: Final = "***"

# Query parameter names that carry credentials: Functions keys (code), SAS (sig, and the
# whole token under names like sas/token), API keys, passwords, client secrets.
_SECRET_QUERY_NAMES: Final = frozenset(
    "code sig signature key apikey api-key api_key sas password pwd secret client_secret "
    "access_token id_token refresh_token token skoid sktid".split()
)
_SECRET_NAME_PARTS: Final = ("token", "secret", "password", "signature")
_SECRET_HEADERS: Final = frozenset(
    "authorization proxy-authorization cookie set-cookie x-functions-key x-webhook-secret "
    "x-ms-client-principal x-ms-client-principal-id x-ms-client-principal-name aeg-sas-key "
    "aeg-sas-token api-key ocp-apim-subscription-key x-api-key".split()
)
# name=value pairs of a query string, wherever a URL appears in a text.
_QUERY_PAIR = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&#;\s?]+)=(?P<value>[^&#;\s]*)")


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
