"""The one error the data plane answers with, in the service's JSON error shape.

Event Grid answers failures as ``{"error": {"code": ..., "message": ...}}`` (the OData v4
shape azure-core's ``HttpResponseError`` reads), so SDK exceptions carry the emulator's
code and message just as they carry the service's.
"""

from __future__ import annotations

import json


class ApiError(Exception):
    """A request the emulator refuses: HTTP status, error code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def body(self) -> bytes:
        return json.dumps({"error": {"code": self.code, "message": self.message}}).encode()


def bad_request(message: str, code: str = "BadRequest") -> ApiError:
    return ApiError(400, code, message)


def argument_invalid(name: str) -> ApiError:
    """The answer the service gives for an out-of-range query parameter."""
    return ApiError(400, "ArgumentInvalid", f"Invalid {name} parameter")


def not_found(message: str) -> ApiError:
    return ApiError(404, "NotFound", message)
