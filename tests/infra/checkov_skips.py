"""The checkov checks that do not apply to Inferbus, each with the reason, in one place.

A skip names the resource types it covers: the same check still fails on any other type.
tests/infra/test_checkov.py fails on every failed check not listed here, and on an entry
that no longer matches any failure (a stale skip hides nothing and is removed).

Reasons fall in three groups:

- **No virtual network by design.** The Function App runs on Flex Consumption without VNet
  integration and Event Grid delivers to public webhooks, so the storage accounts, the
  Event Grid topic, the Azure OpenAI account (queue lane and Global Batch) and the site keep public
  endpoints. They accept Microsoft Entra ID only (no shared keys, no SAS, no topic or
  account keys: tests/infra/test_security.py, tests/infra/test_global_batch.py) and TLS 1.2.
- **Flex Consumption.** Settings of dedicated App Service plans that Flex Consumption does
  not have (worker count, Azure Files content share, platform health check, FTPS state).
- **Checkov reads ``Microsoft.Web/sites/config`` children as a whole site.** The App Service
  checks below look for site configuration (logging, .NET version, public access) on any
  ``sites/config`` resource; Inferbus has two such children, ``appsettings`` and
  ``authsettingsV2``, which hold nothing of the kind. The site itself is checked.
"""

from __future__ import annotations

from dataclasses import dataclass

SITE = "Microsoft.Web/sites"
SITE_CONFIG = "Microsoft.Web/sites/config"
PLAN = "Microsoft.Web/serverfarms"
STORAGE = "Microsoft.Storage/storageAccounts"
EVENT_GRID_TOPIC = "Microsoft.EventGrid/topics"
COGNITIVE_SERVICES = "Microsoft.CognitiveServices/accounts"


@dataclass(frozen=True)
class Skip:
    resource_types: frozenset[str]
    reason: str


def _skip(reason: str, *resource_types: str) -> Skip:
    return Skip(frozenset(resource_types), reason)


SKIPS: dict[str, Skip] = {
    # --- no virtual network by design ---------------------------------------------------
    "CKV_AZURE_35": _skip(
        "Storage default network action Deny: the Flex Consumption app has no VNet "
        "integration and reaches both accounts (host storage, data) over their public "
        "endpoints; access is Entra ID only (allowSharedKeyAccess false), HTTPS, TLS 1.2.",
        STORAGE,
    ),
    "CKV_AZURE_59": _skip(
        "Storage publicNetworkAccess Disabled: same reason as CKV_AZURE_35 (no private "
        "endpoints in this deployment); blob public access is off (CKV_AZURE_34 passes).",
        STORAGE,
    ),
    "CKV_AZURE_193": _skip(
        "Event Grid topic publicNetworkAccess Disabled: the app publishes result CloudEvents "
        "from Flex Consumption without VNet integration; the topic accepts Entra ID only "
        "(disableLocalAuth, CKV_AZURE_192 passes) over TLS 1.2.",
        EVENT_GRID_TOPIC,
    ),
    "CKV_AZURE_134": _skip(
        "Azure OpenAI account publicNetworkAccess Disabled: the app calls the queue lane's "
        "model and submits Global Batch files and batches from Flex Consumption without "
        "VNet integration; the account "
        "accepts Entra ID only (disableLocalAuth, CKV_AZURE_236 passes) and its one data "
        "role is the app identity's (parameter publicNetworkAccess for private endpoints).",
        COGNITIVE_SERVICES,
    ),
    "CKV_AZURE_222": _skip(
        "Web app publicNetworkAccess Disabled: the request API is public by design and Event "
        "Grid delivers to its webhooks over the internet; App Service authentication "
        "(Return401) and function keys guard it. On sites/config children checkov looks for a "
        "site property that these children (appsettings, authsettingsV2) do not carry.",
        SITE,
        SITE_CONFIG,
    ),
    "CKV_AZURE_17": _skip(
        "Incoming client certificates: callers authenticate with Entra tokens, and Event Grid "
        "webhook delivery cannot present a client certificate, so requiring one would stop "
        "blob intake and result events.",
        SITE,
    ),
    # --- Flex Consumption ---------------------------------------------------------------
    "CKV_AZURE_212": _skip(
        "Minimum worker count (siteConfig.numberOfWorkers > 1): a dedicated-plan setting; "
        "Flex Consumption scales per function group (functionAppConfig.scaleAndConcurrency: "
        "maximumInstanceCount, optional alwaysReady parameter).",
        SITE,
    ),
    "CKV_AZURE_213": _skip(
        "App Service health check (siteConfig.healthCheckPath): the platform health check "
        "is not offered on Flex Consumption; failures are watched by the function-failures "
        "and dead-letter alerts (modules/alerts.bicep).",
        SITE,
    ),
    "CKV_AZURE_78": _skip(
        "FTP deployments off through siteConfig.ftpsState: Flex Consumption rejects that "
        "property (its deprecation table: FTPS is not supported; ARM answers 400 for a Flex "
        "site that sets it). FTP and SCM basic publishing are off through the site's "
        "basicPublishingCredentialsPolicies ftp and scm (allow false), which "
        "tests/infra/test_security.py asserts, and tests/infra/test_flex_site.py keeps "
        "ftpsState out of the site.",
        SITE,
    ),
    "CKV_AZURE_88": _skip(
        "Azure Files storage mount: Flex Consumption deploys from a blob container "
        "(functionAppConfig.deployment) and has no content share (WEBSITE_CONTENT* settings "
        "are rejected; tests/infra/test_app_settings.py).",
        SITE_CONFIG,
    ),
    "CKV_AZURE_225": _skip(
        "Zone-redundant plan: an availability and cost choice for a region that offers "
        "zone-redundant Flex Consumption, not a security control; the plan is FC1 in any "
        "Flex Consumption region.",
        PLAN,
    ),
    "CKV_AZURE_206": _skip(
        "Geo-replicated storage (GRS/GZRS): a durability, cost and data-residency decision "
        "per environment (skuName parameter of the storage modules, Standard_LRS by "
        "default), not a security control.",
        STORAGE,
    ),
    # --- checkov reads sites/config children (appsettings, authsettingsV2) as a site ----
    "CKV_AZURE_13": _skip(
        "App Service authentication: checkov expects the V1 schema (properties.enabled) on "
        "a config named authsettings*; Inferbus configures authsettingsV2 (platform.enabled, "
        "requireAuthentication, Return401; tests/infra/test_authentication.py), and "
        "appsettings is not an auth resource.",
        SITE_CONFIG,
    ),
    "CKV_AZURE_63": _skip(
        "HTTP logging (httpLoggingEnabled): App Service web-server logs of a 'web' config; "
        "the children here are appsettings and authsettingsV2. Requests are logged by "
        "Application Insights (APPLICATIONINSIGHTS_CONNECTION_STRING).",
        SITE_CONFIG,
    ),
    "CKV_AZURE_65": _skip(
        "Detailed error messages (detailedErrorLoggingEnabled): IIS-style App Service log of "
        "a 'web' config, not present on appsettings/authsettingsV2 nor on a Linux Flex app; "
        "errors go to Application Insights.",
        SITE_CONFIG,
    ),
    "CKV_AZURE_66": _skip(
        "Failed request tracing (requestTracingEnabled): IIS-style App Service log of a 'web' "
        "config, as CKV_AZURE_65.",
        SITE_CONFIG,
    ),
    "CKV_AZURE_80": _skip(
        ".NET Framework version: the app is Python 3.13 (functionAppConfig.runtime); there is "
        "no .NET version to set.",
        SITE_CONFIG,
    ),
}
