"""Bearer-token validation for Entra-protected webhooks, with PyJWT.

Signing keys come from a JWKS endpoint (``WebhookJwksUri``; by default Entra's common
key set, which signs tokens of every tenant) and are cached by PyJWT's client. Audience,
issuer, expiry and signature are all checked; a bad token is Forbidden, unreachable keys
are transient (Event Grid retries the delivery).
"""

from __future__ import annotations

from typing import Any

import jwt

from shared.errors import Forbidden, TransientError

ENTRA_COMMON_JWKS = "https://login.microsoftonline.com/common/discovery/v2.0/keys"


class JwtValidator:
    """Implements ``events.ports.TokenValidator``."""

    def __init__(self, audience: str, issuer: str, jwks_uri: str | None = None) -> None:
        self._audience = audience
        self._issuer = issuer
        self._keys = jwt.PyJWKClient(jwks_uri or ENTRA_COMMON_JWKS, cache_keys=True, timeout=10)

    def validate(self, token: str) -> dict[str, Any]:
        try:
            signing_key = self._keys.get_signing_key_from_jwt(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                signing_key.key,
                algorithms=["RS256"],
                audience=self._audience,
                issuer=self._issuer,
                options={"require": ["exp", "aud", "iss"]},
            )
        except jwt.PyJWKClientConnectionError as error:
            raise TransientError(
                f"the token's signing keys could not be fetched: {error}"
            ) from error
        except jwt.PyJWTError as error:
            raise Forbidden(f"the bearer token is not acceptable: {error}") from error
        return claims
