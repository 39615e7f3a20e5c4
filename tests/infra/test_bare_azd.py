"""A bare `azd up`: nothing to set first, and only Flex Consumption regions on offer.

azd itself asks for the environment name (AZURE_ENV_NAME), the subscription and the
region (AZURE_LOCATION, offered from the ``@allowed`` list of main.bicep's ``location``,
which carries azd's ``location`` metadata). Every other value main.bicepparam reads has a
fallback, except the API's app registration, which the preprovision hook supplies
(tests/infra/test_azd_hooks.py runs it).
"""

from __future__ import annotations

import re

from tests.infra import MAIN, decorator, has_default, params, read, resolve, variables
from tests.infra.test_azd import _READ_ENV, azure_yaml, bicepparam_assignments
from tests.infra.test_azd_hooks import hook_module

api_registration = hook_module("api_registration")

# What azd asks for itself on a first `azd up`.
AZD_OWN = {"AZURE_ENV_NAME"}
# Regions that offer Flex Consumption: the production regions of the location list in
# Microsoft's Flex Consumption azd template (Azure-Samples/functions-quickstart-python-http-azd,
# infra/main.bicep), each also in `az functionapp list-flexconsumption-locations`. Newer
# Flex regions may be added to main.bicep and here together.
FLEX_REGIONS = {
    "australiaeast", "australiasoutheast", "brazilsouth", "canadacentral", "centralindia",
    "centralus", "eastasia", "eastus", "eastus2", "francecentral", "germanywestcentral",
    "italynorth", "japaneast", "koreacentral", "northcentralus", "northeurope", "norwayeast",
    "southafricanorth", "southcentralus", "southeastasia", "southindia", "spaincentral",
    "swedencentral", "uaenorth", "uksouth", "ukwest", "westcentralus", "westeurope", "westus",
    "westus2", "westus3",
}  # fmt: skip
# Of those, the regions without availability zones (Azure's list of regions with zones).
WITHOUT_ZONES = {
    "australiasoutheast", "northcentralus", "southindia", "ukwest", "westcentralus", "westus",
}  # fmt: skip


def variables_read() -> dict[str, str | None]:
    """Each environment variable main.bicepparam reads, with its fallback (None: none)."""
    found: dict[str, str | None] = {}
    for value in bicepparam_assignments().values():
        for match in _READ_ENV.finditer(value):
            found[match.group(1)] = match.group(2)
    return found


def test_only_azds_own_values_have_no_fallback() -> None:
    without = {name for name, fallback in variables_read().items() if fallback is None}
    assert without == AZD_OWN, f"a bare azd up would stop on {without - AZD_OWN}"


def test_every_required_parameter_is_supplied_by_azd_or_the_preprovision_hook() -> None:
    declared = params(MAIN)
    required = {name for name, param in declared.items() if not has_default(param)}
    assignments = bicepparam_assignments()
    supplied_by_hook = set()
    for name in required:
        (variable,) = _READ_ENV.findall(assignments[name])
        if variable[0] in AZD_OWN:
            continue
        assert variable[0] == api_registration.SETTING, f"{name}: nothing supplies {variable}"
        assert (decorator(declared[name], "min_length") or 0) > 0, "empty must be refused"
        supplied_by_hook.add(name)
    assert supplied_by_hook == {"apiClientId"}
    hook = azure_yaml()["hooks"]["preprovision"]
    assert {platform["run"].split()[-1] for platform in hook.values()} == {
        "infra/hooks/api_registration.py"
    }


def test_azd_offers_only_flex_consumption_regions() -> None:
    location = params(MAIN)["location"]
    assert decorator(location, "metadata") == {"azd": {"type": "location"}}
    offered = decorator(location, "allowed")
    assert offered == sorted(offered), "kept in order"
    assert set(offered) <= FLEX_REGIONS, f"not Flex Consumption: {set(offered) - FLEX_REGIONS}"
    assert has_default(location), "the resource group's region when it is one of them"


def test_zone_redundancy_only_where_the_region_has_zones() -> None:
    offered = set(decorator(params(MAIN)["location"], "allowed"))
    with_zones = set(resolve(variables(MAIN)["regionsWithZones"], {}))
    assert with_zones == offered - WITHOUT_ZONES
    assert re.search(r"var zoneRedundant = contains\(regionsWithZones, location\)", read(MAIN)), (
        "zone redundancy follows the region"
    )
