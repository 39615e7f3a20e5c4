"""Who may deliver events to the webhook, beyond the function key the host checks.

Event Grid webhook subscriptions authenticate in up to three ways, all of which can be
combined (see infra/README.md for which subscription uses which):

- the function key in the endpoint URL (``?code=``), checked by the Functions host before
  any code runs;
- a shared secret the subscription sends as a static delivery header
  (``X-Webhook-Secret``, a *secret* delivery attribute mapping), when
  ``WebhookSharedSecret`` is set;
- a Microsoft Entra ID bearer token that Event Grid obtains for the protected app
  registration, when ``WebhookTokenAudience`` and ``WebhookTokenIssuer`` are set.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from shared.errors import Forbidden, Unauthenticated
from shared.events.ports import TokenValidator

SECRET_HEADER = "x-webhook-secret"  # noqa: S105 (a header name, not a secret)


def authenticate_delivery(
    headers: Mapping[str, str], shared_secret: str | None, tokens: TokenValidator | None
) -> None:
    """Raise Unauthenticated (401) or Forbidden (403) unless every configured check passes."""
    if shared_secret:
        presented = headers.get(SECRET_HEADER)
        if not presented:
            raise Unauthenticated(f"the delivery lacks the {SECRET_HEADER} header")
        if not hmac.compare_digest(presented.encode(), shared_secret.encode()):
            raise Forbidden("the webhook secret does not match")
    if tokens is not None:
        authorization = headers.get("authorization", "")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated("the delivery lacks a bearer token")
        tokens.validate(token.strip())
