"""The HTTP side of push delivery: the abuse-protection handshake and the POST.

Event Grid validates a webhook with the CloudEvents abuse-protection handshake (an
``OPTIONS`` request carrying ``WebHook-Request-Origin``; the endpoint must answer 200 with
``WebHook-Allowed-Origin`` naming that origin or ``*``; ``WebHook-Request-Callback`` and
rates are not used by the service) and then POSTs each event in structured mode. Only
200-204 count as delivered; redirects are not followed (``http.client``, not urllib).
"""

from __future__ import annotations

import http
import http.client
import logging
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass

log = logging.getLogger("eventgrid_emulator.webhook")

ORIGIN = "eventgrid.azure.net"
CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
DELIVERED = range(200, 205)
# Answers the service never retries: the event goes straight to the dead-letter destination.
NOT_RETRIED = frozenset({400, 401, 403, 404, 413, 414})


@dataclass(frozen=True)
class Outcome:
    """How one delivery attempt ended; ``result`` is what a dead letter records."""

    delivered: bool
    retryable: bool
    result: str
    status: int | None = None


def _phrase(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase.replace(" ", "")
    except ValueError:
        return f"Http{status}"


class WebhookClient:
    def __init__(self, timeout: float = 30.0) -> None:
        self.timeout = timeout

    def _request(
        self, method: str, url: str, body: bytes | None, headers: Mapping[str, str]
    ) -> http.client.HTTPResponse:
        parts = urllib.parse.urlsplit(url)
        connection_type = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        connection = connection_type(parts.netloc, timeout=self.timeout)
        target = parts.path or "/"
        if parts.query:
            target += f"?{parts.query}"
        try:
            connection.request(method, target, body=body, headers=dict(headers))
            response = connection.getresponse()
            response.read()
            return response
        finally:
            connection.close()

    def handshake(self, url: str) -> str | None:
        """None when the endpoint accepts Event Grid's deliveries, else why not."""
        try:
            response = self._request("OPTIONS", url, None, {"WebHook-Request-Origin": ORIGIN})
        except OSError as error:
            return f"validation request failed: {error!r}"
        allowed = response.getheader("WebHook-Allowed-Origin", "")
        if response.status != 200:
            return f"validation answered {response.status}"
        if allowed.strip() not in (ORIGIN, "*"):
            return f"validation answered WebHook-Allowed-Origin {allowed!r}"
        return None

    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> Outcome:
        sent = {"Content-Type": CONTENT_TYPE, **headers}
        try:
            response = self._request("POST", url, body, sent)
        except TimeoutError:
            return Outcome(False, False, "TimedOut")
        except OSError as error:
            log.info("delivery to %s failed: %r", url, error)
            return Outcome(False, False, "SocketError")
        status = response.status
        if status in DELIVERED:
            return Outcome(True, False, _phrase(status), status)
        return Outcome(False, status not in NOT_RETRIED, _phrase(status), status)
