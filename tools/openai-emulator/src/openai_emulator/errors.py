"""The error the API answers with, in Azure OpenAI's JSON error shape.

Azure OpenAI answers failures as ``{"error": {"code": ..., "message": ...}}``; the
``openai`` SDK turns the status into its exception class (``BadRequestError``,
``NotFoundError``...) and keeps the body's ``code`` and ``message``, so the app sees the
emulator's refusals exactly as it would see the service's.
"""

from __future__ import annotations

import json
from typing import Any

# The service's answer to a missing or wrong key (its text).
UNAUTHORIZED_MESSAGE = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to "
    "provide a valid key for an active subscription and use a correct regional API "
    "endpoint for your resource."
)


class ApiError(Exception):
    """A request the emulator refuses: HTTP status, error code and message."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        param: str | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        # The field at fault and the error's ``type``, which the service adds to a refused
        # parameter (``invalid_request_error``): a client reads them to say which field.
        self.param = param
        self.kind = kind

    def body_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.param is not None:
            error["param"] = self.param
        if self.kind is not None:
            error["type"] = self.kind
        return {"error": error}

    def body(self) -> bytes:
        return json.dumps(self.body_json()).encode()


def bad_request(message: str, code: str = "invalid_request") -> ApiError:
    return ApiError(400, code, message)


def not_found(message: str, code: str = "not_found") -> ApiError:
    return ApiError(404, code, message)


def conflict(message: str, code: str = "conflict") -> ApiError:
    return ApiError(409, code, message)


def unauthorized() -> ApiError:
    return ApiError(401, "401", UNAUTHORIZED_MESSAGE)
