"""Which tenants a webhook delivery may create work for (app setting ``WebhookTenants``).

``/api/v1/events`` is excluded from App Service authentication (Event Grid cannot sign
in), so no platform principal names the caller's tenant, and an ``InferenceRequested``
event names its tenant itself. Without a limit, whoever can deliver to the webhook could
create work for any tenant. ``WebhookTenants`` binds each delivery credential to the
tenants it may act for.

Format: entries separated by ``;``, each ``<credential>=<tenants>``:

- ``<credential>`` is the SHA-256 (64 lower-case hex digits) of a delivery secret, so the
  setting itself holds no secret. The subscription sends the secret in the
  ``X-Webhook-Secret`` header (an Event Grid static delivery attribute marked secret).
  Compute it with ``printf %s "$SECRET" | sha256sum``.
- ``<tenants>`` is ``*`` (any tenant: a subscription of the app's own topics) or tenant ids
  separated by ``|``.

Example: ``WebhookTenants=3b1f...e0=contoso|fabrikam;9c2d...41=*``.

Rules:

- set: every event delivery must carry ``X-Webhook-Secret`` (401 without it) whose hash is
  one of the entries (403 otherwise); an event for a tenant outside the entry's tenants
  is rejected with the reason, and makes no job;
- empty, outside Azure: deliveries are not limited by tenant (the local stack and its
  tests, where Event Grid is an emulator and the webhook is on loopback);
- empty, in Azure (``WEBSITE_INSTANCE_ID`` or ``WEBSITE_SITE_NAME`` is set): an event
  that would create work is a configuration error (HTTP 500, retried by Event Grid, so
  nothing is lost once the setting is fixed), so a deployment never runs an unlimited
  webhook; events that create no work (the app's own result notifications, which the
  default deployment subscribes to this webhook) are still taken as before.

``WebhookSharedSecret`` and Entra bearer tokens (``webhook_auth``) still authenticate the
delivery first; when both secret checks are configured the one secret must satisfy both.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from shared.contracts import TENANT_ID_PATTERN
from shared.errors import ConfigurationError, Forbidden, Unauthenticated
from shared.events.webhook_auth import SECRET_HEADER

ANY_TENANT: Final = "*"
AZURE_MARKERS: Final = ("WEBSITE_INSTANCE_ID", "WEBSITE_SITE_NAME")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class TenantScope:
    """The tenants one delivery may create work for (``everyone``: any tenant)."""

    tenants: frozenset[str] = frozenset()
    everyone: bool = False
    # Why no tenant may be served yet (the setting is empty where it is required).
    unconfigured: str | None = None

    def allows(self, tenant_id: str) -> bool:
        if self.unconfigured:
            raise ConfigurationError(self.unconfigured)
        return self.everyone or tenant_id in self.tenants

    def describe(self) -> str:
        return "any tenant" if self.everyone else ", ".join(sorted(self.tenants))


UNRESTRICTED: Final = TenantScope(everyone=True)
UNCONFIGURED_IN_AZURE: Final = TenantScope(
    unconfigured=(
        "WebhookTenants is empty: in Azure the events webhook creates work only for the "
        "tenants of a '<sha256 of a delivery secret>=<tenants>' entry "
        "(see shared/events/webhook_tenancy.py)"
    )
)


@dataclass(frozen=True)
class WebhookTenancy:
    """The parsed ``WebhookTenants`` setting: credential hash -> scope."""

    scopes: Mapping[str, TenantScope]
    in_azure: bool = False

    def scope_for(self, headers: Mapping[str, str]) -> TenantScope:
        """The scope of the delivery's credential (``headers`` keys lower case): 401 without
        a secret, 403 for an unknown one; in Azure when unset, a scope that refuses work."""
        if not self.scopes:
            return UNCONFIGURED_IN_AZURE if self.in_azure else UNRESTRICTED
        presented = headers.get(SECRET_HEADER)
        if not presented:
            raise Unauthenticated(
                f"the delivery lacks the {SECRET_HEADER} header that WebhookTenants requires"
            )
        digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).hexdigest()
        for credential, scope in self.scopes.items():
            if hmac.compare_digest(digest, credential):
                return scope
        raise Forbidden("the webhook secret is not one WebhookTenants knows")


def _entry(text: str) -> tuple[str, TenantScope]:
    credential, separator, tenants = (part.strip() for part in text.partition("="))
    credential = credential.lower()
    if not separator or not _SHA256_HEX.fullmatch(credential):
        raise ConfigurationError(
            f"WebhookTenants entry {text[:12]!r}... must be "
            "'<64 hex digits: sha256 of the secret>=<tenant>|<tenant>' or '<...>=*'"
        )
    if tenants == ANY_TENANT:
        return credential, UNRESTRICTED
    names = [name.strip() for name in tenants.split("|") if name.strip()]
    invalid = [name for name in names if not TENANT_ID_PATTERN.fullmatch(name)]
    if not names or invalid:
        raise ConfigurationError(
            f"WebhookTenants entry for {credential[:8]}... names no valid tenants "
            f"({', '.join(invalid) or 'none'}): use tenant ids separated by '|', or '*'"
        )
    return credential, TenantScope(frozenset(names))


def parse_webhook_tenants(value: str | None, *, in_azure: bool = False) -> WebhookTenancy:
    """The setting's value parsed; ConfigurationError naming the first bad entry."""
    scopes: dict[str, TenantScope] = {}
    for text in (value or "").split(";"):
        if not text.strip():
            continue
        credential, scope = _entry(text)
        if credential in scopes:
            raise ConfigurationError(f"WebhookTenants names {credential[:8]}... twice")
        scopes[credential] = scope
    return WebhookTenancy(scopes, in_azure)


def running_in_azure(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the app runs on App Service / Functions (the platform sets these)."""
    environ = os.environ if environ is None else environ
    return any(environ.get(name) for name in AZURE_MARKERS)


@lru_cache(maxsize=4)
def webhook_tenancy(value: str | None, in_azure: bool) -> WebhookTenancy:
    """Parsed once per distinct setting (the webhook asks on every delivery)."""
    return parse_webhook_tenants(value, in_azure=in_azure)
