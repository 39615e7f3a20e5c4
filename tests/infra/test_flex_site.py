"""The Function App is a valid Flex Consumption site: no property Flex rejects or ignores.

Flex Consumption moved the runtime, scale and always-ready settings into
``properties.functionAppConfig`` and rejects the site properties they replace (ARM answers
400 "The following site configuration property (Site.SiteConfig.<name>) for Flex
Consumption sites is invalid"). The table below holds the site properties of Microsoft's
"Flex Consumption plan deprecations" list, each with what replaces it:
https://learn.microsoft.com/azure/azure-functions/functions-app-settings#flex-consumption-plan-deprecations
(app settings of the same list: ``FLEX_DEPRECATED`` in test_app_settings.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra import (
    FUNCTION_APP,
    MAIN,
    BicepElement,
    decorator,
    params,
    resource_body,
    resources_of_type,
)

# Site properties (paths under the site's body) Flex Consumption does not support, with
# what replaces each; compared case-insensitively, as ARM reads property names.
FLEX_DEPRECATED_SITE_PROPERTIES = {
    "properties.siteConfig.alwaysOn": "not supported: instances scale per function group",
    "properties.siteConfig.ftpsState": "not supported (FTPS): basicPublishingCredentialsPolicies",
    "properties.siteConfig.functionAppScaleLimit": (
        "functionAppConfig.scaleAndConcurrency.maximumInstanceCount"
    ),
    "properties.siteConfig.functionsRuntimeScaleMonitoringEnabled": (
        "not supported: Flex scales on its own triggers' metrics"
    ),
    "properties.siteConfig.javaVersion": "functionAppConfig.runtime",
    "properties.siteConfig.linuxFxVersion": "functionAppConfig.runtime",
    "properties.siteConfig.netFrameworkVersion": "functionAppConfig.runtime",
    "properties.siteConfig.powerShellVersion": "functionAppConfig.runtime",
    "properties.siteConfig.windowsFxVersion": "functionAppConfig.runtime (Flex is Linux)",
    "properties.siteConfig.preWarmedInstanceCount": (
        "functionAppConfig.scaleAndConcurrency.alwaysReady"
    ),
    "properties.siteConfig.minimumElasticInstanceCount": (
        "functionAppConfig.scaleAndConcurrency.alwaysReady"
    ),
    "properties.siteConfig.use32BitWorkerProcess": "not supported: 64-bit Linux only",
    "properties.siteConfig.numberOfWorkers": "not supported: scale is per function group",
    "properties.containerSize": "functionAppConfig.scaleAndConcurrency.instanceMemoryMB",
    "properties.dailyMemoryTimeQuota": "not supported",
}
# The site's ``name``, ``location``, ``parent`` and symbols are not properties of the site.
_NOT_PROPERTIES = {"name", "location", "dependsOn"}


def property_paths(value: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every key a literal object sets (expressions are leaves)."""
    if not isinstance(value, dict) or isinstance(value, BicepElement):
        return []
    if len(value) == 1 and next(iter(value)) in ("function", "operator"):
        return []  # an expression node, not an object of the template
    paths = []
    for key, item in value.items():
        path = f"{prefix}{key.strip(chr(39))}"
        paths.append(path)
        paths.extend(property_paths(item, f"{path}."))
    return paths


def flex_violations(body: dict[str, Any]) -> list[str]:
    """The paths of ``body`` that the deprecation table lists, with their replacement."""
    deprecated = {path.lower(): path for path in FLEX_DEPRECATED_SITE_PROPERTIES}
    found = []
    for path in property_paths({k: v for k, v in body.items() if k not in _NOT_PROPERTIES}):
        if path.lower() in deprecated:
            listed = deprecated[path.lower()]
            found.append(f"{path}: {FLEX_DEPRECATED_SITE_PROPERTIES[listed]}")
    return found


def _site() -> dict[str, Any]:
    (site,) = resources_of_type(FUNCTION_APP, "Microsoft.Web/sites").values()
    return resource_body(site)


def test_the_site_sets_no_property_flex_rejects() -> None:
    assert not flex_violations(_site()), "not valid on a Flex Consumption site"


def test_the_site_is_checked_whole() -> None:
    """The walk reaches the site's nested objects (the check is not vacuous)."""
    paths = property_paths(_site())
    for expected in (
        "properties.siteConfig.minTlsVersion",
        "properties.functionAppConfig.scaleAndConcurrency.maximumInstanceCount",
        "properties.functionAppConfig.runtime.version",
    ):
        assert expected in paths


@pytest.mark.parametrize(
    ("site_config", "flagged"),
    [
        ({"ftpsState": "Disabled"}, "properties.siteConfig.ftpsState"),
        ({"LinuxFxVersion": "Python|3.13"}, "properties.siteConfig.LinuxFxVersion"),
        ({"alwaysOn": True, "minTlsVersion": "1.2"}, "properties.siteConfig.alwaysOn"),
    ],
)
def test_a_deprecated_property_is_named_with_its_replacement(
    site_config: dict[str, Any], flagged: str
) -> None:
    (violation,) = flex_violations({"properties": {"siteConfig": site_config}})
    assert violation.startswith(f"{flagged}: ")


def test_no_site_config_resource_carries_site_properties() -> None:
    """Site properties also reach a site through a ``sites/config`` ``web`` child."""
    configs = resources_of_type(FUNCTION_APP, "Microsoft.Web/sites/config")
    names = sorted(str(resource_body(config)["name"]) for config in configs.values())
    assert names == ["appsettings"], "a 'web' config would need the same check"


@pytest.mark.parametrize("path", [MAIN, FUNCTION_APP], ids=lambda p: p.name)
def test_maximum_instance_count_starts_at_flex_lowest_maximum(path: Any) -> None:
    """Flex Consumption's maximum instance count goes from 40 to 1,000."""
    declared = params(path)["maximumInstanceCount"]
    assert decorator(declared, "min_value") == 40
    assert decorator(declared, "max_value") == 1000
    assert declared["default"] >= 40
