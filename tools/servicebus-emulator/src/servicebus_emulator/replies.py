"""AMQP error conditions and node replies shared by links, consumers and nodes."""

from __future__ import annotations

import logging
from typing import Any

from proton import Condition, Link, Message, Terminus, symbol

LOG = logging.getLogger("servicebus_emulator.replies")
# The condition of a next-available session wait that ended with no session.
SESSION_WAIT_TIMED_OUT = "com.microsoft:timeout"


def error_condition(condition: str, description: str) -> Condition:
    """An AMQP error with a non-empty info map: the SDK indexes all three error fields."""
    return Condition(condition, description, {symbol("x-opt-emulator"): True})


def refuse(link: Link, condition: str, description: str) -> None:
    """Attach then detach with an error: the SDK surfaces the condition to the caller."""
    if link.source.type == Terminus.UNSPECIFIED and link.remote_source is not None:
        link.source.copy(link.remote_source)
    if link.is_sender and condition == SESSION_WAIT_TIMED_OUT:
        # A next-available wait that found no session: the link is refused as AMQP refuses
        # a terminus it cannot establish (a null source, then the detach with the error),
        # so neither SDK opens a receiver without a session; both raise
        # OperationTimeoutError once the detach is read.
        link.source.type = Terminus.UNSPECIFIED
    elif link.is_sender:
        # A refused receive link names no entity, so the SDK skips its session bookkeeping
        # (which expects a granted session id) and only reports the detach error.
        link.source.address = "$refused"
        link.source.filter.clear()
    link.open()
    link.condition = error_condition(condition, description)
    link.close()
    LOG.info("link refused: %s %s", condition, description)


def status_reply(
    code: int, description: str, condition: str | None = None, body: Any = None
) -> Message:
    """A node reply; $cbs reads ``status-code``, $management reads ``statusCode``."""
    properties: dict[str, Any] = {
        "statusCode": code,
        "statusDescription": description,
        "status-code": code,
        "status-description": description,
    }
    if condition:
        properties["errorCondition"] = symbol(condition)
    return Message(body=body, properties=properties)
