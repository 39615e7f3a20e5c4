"""Keys never reach the host's log: credential query parameters are redacted in any line.

The host logs request lines and prints every log the worker sends; a function key rides
in ``?code=``, a SAS in ``sig``, and an app may log a URL it was called with. Every line
the host writes about a request, and every worker log it prints, goes through
``redact`` first (the app has its own, fuller redaction; this is the host's last line).
"""

from __future__ import annotations

import re

REDACTED = "***"
_SECRET_NAMES = frozenset(
    "code sig signature key apikey api-key api_key sas password pwd secret "
    "access_token id_token refresh_token token".split()
)
_QUERY_PAIR = re.compile(r"(?P<lead>[?&;])(?P<name>[^=&#;\s?]+)=(?P<value>[^&#;\s]*)")


def _is_secret(name: str) -> bool:
    lowered = name.lower()
    return (
        lowered in _SECRET_NAMES
        or lowered.endswith("key")
        or any(part in lowered for part in ("token", "secret", "password"))
    )


def redact(text: str) -> str:
    """``text`` with the value of every credential query parameter replaced by ``***``."""
    if "=" not in text:
        return text

    def replace(match: re.Match[str]) -> str:
        if not _is_secret(match.group("name")):
            return match.group(0)
        return f"{match.group('lead')}{match.group('name')}={REDACTED}"

    return _QUERY_PAIR.sub(replace, text)
