"""Who is calling: the tenant comes from the platform-authenticated principal.

App Service authentication (Easy Auth) validates the caller's token and passes its claims
to the app as ``x-ms-client-principal``: base64-encoded JSON with a ``claims`` list of
``{typ, val}``. The platform strips that header from incoming requests, so it can be
trusted when authentication is enabled on the Function App (the Bicep enables it).
``X-Tenant-Id`` is a development convenience, honoured only where AllowTenantHeader is set.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass

from shared.bounded_json import parse_json
from shared.contracts import TENANT_ID_PATTERN
from shared.errors import InvalidInput, Unauthenticated

PRINCIPAL_HEADER = "x-ms-client-principal"
TENANT_HEADER = "x-tenant-id"
# App Service caps request headers well below this; a principal with many group claims
# is still only a few kilobytes.
MAX_PRINCIPAL_BYTES = 65_536


def _principal_claims(encoded: str) -> dict[str, object]:
    """The principal's claims by type, each with its first value as sent (any JSON value:
    only the tenant claim must be a string, and ``resolve_tenant`` checks it)."""
    try:
        decoded = base64.b64decode(encoded, validate=True)
        document = parse_json(decoded, max_bytes=MAX_PRINCIPAL_BYTES, what="the client principal")
    except (binascii.Error, ValueError, InvalidInput) as error:
        raise Unauthenticated("the client principal header is not valid base64 JSON") from error
    claims = document.get("claims") if isinstance(document, dict) else None
    if not isinstance(claims, list):
        raise Unauthenticated("the client principal carries no claims")
    result: dict[str, object] = {}
    for claim in claims:
        if isinstance(claim, dict) and isinstance(claim.get("typ"), str):
            result.setdefault(claim["typ"], claim.get("val", ""))
    return result


def _tenant_claim(claims: Mapping[str, object], claim_type: str) -> str | None:
    """The tenant named by ``claim_type``, None when the claim is absent or empty, or
    Unauthenticated when its value is not a string: ``str(None)`` or ``str(0)`` would
    make up a tenant ("None", "0") that no identity provider issued."""
    if claim_type not in claims:
        return None
    value = claims[claim_type]
    if not isinstance(value, str):
        raise Unauthenticated(
            f"the client principal's tenant claim '{claim_type}' is not a string "
            f"(it is {_json_kind(value)})"
        )
    return value or None


def _json_kind(value: object) -> str:
    """The JSON name of a decoded value's kind (for the caller, not Python's type name)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _checked(tenant_id: str, origin: str) -> str:
    if not TENANT_ID_PATTERN.fullmatch(tenant_id):
        raise Unauthenticated(f"the tenant in {origin} is not a valid tenant id")
    return tenant_id


def resolve_tenant(
    headers: Mapping[str, str], claim_types: tuple[str, ...], allow_tenant_header: bool
) -> str:
    """The caller's tenant id, or Unauthenticated. ``headers`` keys are lower case."""
    encoded = headers.get(PRINCIPAL_HEADER)
    if encoded:
        claims = _principal_claims(encoded)
        for claim_type in claim_types:
            tenant_id = _tenant_claim(claims, claim_type)
            if tenant_id is not None:
                return _checked(tenant_id, "the client principal")
        raise Unauthenticated(
            "the client principal has no tenant claim (" + ", ".join(claim_types) + ")"
        )
    if allow_tenant_header and headers.get(TENANT_HEADER):
        return _checked(headers[TENANT_HEADER], "X-Tenant-Id")
    raise Unauthenticated("no authenticated caller: sign in through App Service authentication")


@dataclass(frozen=True)
class CallerTenancy:
    """How this deployment reads a caller's tenant: the principal's claim types
    (TenantClaimTypes) and whether the ``X-Tenant-Id`` header is trusted
    (AllowTenantHeader). The HTTP handlers hold one instead of the settings."""

    claim_types: tuple[str, ...]
    allow_tenant_header: bool = False

    def tenant_of(self, headers: Mapping[str, str]) -> str:
        """The caller's tenant id, or Unauthenticated."""
        return resolve_tenant(headers, self.claim_types, self.allow_tenant_header)
