"""RFC 9457 problem details for every error the host itself answers, before any function.

A request the host refuses (its line or headers too large, its body too large or
malformed, no route, a missing key, a method it does not serve, the host stopping) gets
``application/problem+json`` with ``type``, ``title``, ``status`` and ``detail``, the
shape the app's own errors have, never the HTML page of ``http.server``. What a function
answers is the function's and is passed through untouched.

``type`` names the condition (``urn:functions-host:problem:<code>``) so a client can tell
a refusal of the local host from the app's own errors (``urn:inferbus:problem:...``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from http import HTTPStatus

from functions_host.http_messages import OutgoingResponse

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_PREFIX = "urn:functions-host:problem:"


def problem_body(status: int, code: str, detail: str) -> bytes:
    """The JSON document of one problem."""
    document = {
        "type": PROBLEM_TYPE_PREFIX + code,
        "title": _title(status),
        "status": status,
        "detail": detail,
    }
    return json.dumps(document).encode()


def problem(
    status: int, code: str, detail: str, headers: Sequence[tuple[str, str]] = ()
) -> OutgoingResponse:
    """The host's answer for a request it refuses itself."""
    return OutgoingResponse(
        status,
        [("Content-Type", PROBLEM_CONTENT_TYPE), *headers],
        problem_body(status, code, detail),
    )


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"
