"""Claims-based security: the ``$cbs`` put-token exchange.

Without a configured key every well-formed token is accepted (like Microsoft's emulator,
which ignores the key). With a key (``--sas-key`` / ``SERVICEBUS_EMULATOR_SAS_KEY``) the
HMAC-SHA256 signature over ``quote_plus(sr) + "\\n" + se`` must match and ``se`` must be
in the future; anything else is answered 401 and the SDK raises an authentication error.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, quote_plus

from proton import Message

from .amqp_server import AmqpConnection
from .replies import status_reply

LOG = logging.getLogger("servicebus_emulator.cbs")


def token_is_valid(token: str, key: str, now: float) -> bool:
    """True if a ``SharedAccessSignature sr=..&sig=..&se=..&skn=..`` token is signed with key."""
    prefix = "SharedAccessSignature "
    if not token.startswith(prefix):
        return False
    fields = {k: v[0] for k, v in parse_qs(token[len(prefix) :]).items()}
    resource, signature, expiry = fields.get("sr"), fields.get("sig"), fields.get("se")
    if not (resource and signature and expiry and expiry.isdigit()):
        return False
    if int(expiry) < now:
        return False
    to_sign = f"{quote_plus(resource)}\n{expiry}".encode()
    expected = base64.b64encode(hmac.new(key.encode(), to_sign, hashlib.sha256).digest()).decode()
    return hmac.compare_digest(expected, signature)


def make_cbs_handler(sas_key: str | None) -> Callable[[AmqpConnection, str, Message], Message]:
    def handle(conn: AmqpConnection, node: str, request: Message) -> Message:
        properties: dict[Any, Any] = dict(request.properties or {})
        if properties.get("operation") != "put-token":
            return status_reply(400, "Only put-token is supported.", "amqp:not-implemented")
        token = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        if sas_key is not None and not token_is_valid(token, sas_key, time.time()):
            LOG.warning("put-token refused for %s", properties.get("name"))
            return status_reply(
                401,
                "InvalidSignature: the token signature does not match.",
                "amqp:unauthorized-access",
            )
        conn.authorized = True
        return status_reply(202, "Accepted")

    return handle
