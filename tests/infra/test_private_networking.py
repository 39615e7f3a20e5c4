"""``privateNetworking``: off by default; on, private endpoints with public access disabled.

main.bicep's ``privateNetworking`` parameter (infra/README.md, Private networking) deploys
modules/network.bicep (a virtual network, the app's subnet delegated to
``Microsoft.App/environments``, a private endpoints subnet, the private DNS zones) and one
modules/private-endpoint.bicep per service and sub-resource: Service Bus (Premium), both
storage accounts, the Event Grid topic and namespace and the Azure OpenAI account. Each of
those services is passed ``publicNetworkAccess`` ``Disabled``. The checks below evaluate
main.bicep for both settings of the parameter.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra import (
    FUNCTION_APP,
    INFRA,
    MAIN,
    MODULES,
    constants,
    decorator,
    is_reference,
    module,
    modules,
    params,
    read,
    render,
    resolve,
    resource_body,
    resources_of_type,
)

NETWORK = MODULES / "network.bicep"
PRIVATE_ENDPOINT = MODULES / "private-endpoint.bicep"
# main.bicep's module of each service -> its module file and the resource that carries
# publicNetworkAccess.
SERVICES = {
    "hostStorage": ("storage-host.bicep", "Microsoft.Storage/storageAccounts"),
    "dataStorage": ("storage-data.bicep", "Microsoft.Storage/storageAccounts"),
    "serviceBus": ("servicebus.bicep", "Microsoft.ServiceBus/namespaces"),
    "eventGrid": ("eventgrid-topics.bicep", "Microsoft.EventGrid/topics"),
    "eventGridNamespace": ("eventgrid-namespace.bicep", "Microsoft.EventGrid/namespaces"),
    "openAIAccount": ("openai-account.bicep", "Microsoft.CognitiveServices/accounts"),
}
# The service, by the resource type resourceId names, of each private endpoint's group id.
EXPECTED_ENDPOINTS = {
    ("Microsoft.ServiceBus/namespaces", "names.serviceBus", "namespace", "serviceBus"),
    ("Microsoft.Storage/storageAccounts", "names.hostStorage", "blob", "blob"),
    ("Microsoft.Storage/storageAccounts", "names.hostStorage", "queue", "queue"),
    ("Microsoft.Storage/storageAccounts", "names.hostStorage", "table", "table"),
    ("Microsoft.Storage/storageAccounts", "names.dataStorage", "blob", "blob"),
    ("Microsoft.Storage/storageAccounts", "names.dataStorage", "queue", "queue"),
    ("Microsoft.EventGrid/topics", "names.eventGridTopic", "topic", "eventGrid"),
    ("Microsoft.EventGrid/namespaces", "names.eventGridNamespace", "topic", "eventGrid"),
}
# The private DNS zone of each zone key (public Azure cloud).
ZONES = {
    "blob": "privatelink.blob.core.windows.net",
    "queue": "privatelink.queue.core.windows.net",
    "table": "privatelink.table.core.windows.net",
    "serviceBus": "privatelink.servicebus.windows.net",
    "eventGrid": "privatelink.eventgrid.azure.net",
    "openAI": "privatelink.openai.azure.com",
    "cognitiveServices": "privatelink.cognitiveservices.azure.com",
}


def known(private: bool) -> dict[str, Any]:
    return {**constants(MAIN), "environmentName": "env", "privateNetworking": private}


def condition(symbol: str) -> Any:
    return modules(MAIN)[symbol]["config"]["condition"]


def passed_access(symbol: str, private: bool) -> Any:
    return resolve(module(MAIN, symbol)["params"]["publicNetworkAccess"], known(private))


def test_private_networking_is_off_by_default() -> None:
    assert params(MAIN)["privateNetworking"]["default"] is False


@pytest.mark.parametrize("private", [False, True])
def test_the_network_and_its_endpoints_follow_the_parameter(private: bool) -> None:
    values = known(private)
    assert resolve(condition("network"), values) is private
    assert resolve(condition("privateEndpoint"), values) is private
    openai = {**values, "createOpenAIAccount": True}
    assert resolve(condition("openAIPrivateEndpoint"), openai) is private
    assert (
        resolve(condition("openAIPrivateEndpoint"), {**openai, "createOpenAIAccount": False})
        is False
    )


@pytest.mark.parametrize("private", [False, True])
def test_each_service_gets_public_access_from_the_parameter(private: bool) -> None:
    expected = "Disabled" if private else "Enabled"
    for symbol in SERVICES:
        assert passed_access(symbol, private) == expected, symbol


@pytest.mark.parametrize("symbol", sorted(SERVICES))
def test_each_service_sets_public_access_from_its_parameter(symbol: str) -> None:
    file, resource_type = SERVICES[symbol]
    path = MODULES / file
    (resource,) = resources_of_type(path, resource_type).values()
    properties = resource_body(resource)["properties"]
    assert is_reference(properties["publicNetworkAccess"], "publicNetworkAccess")
    assert params(path)["publicNetworkAccess"]["default"] == "Enabled"
    if "networkAcls" in properties:
        # Storage and Azure OpenAI: no public network rule lets traffic in when disabled.
        action = properties["networkAcls"]["defaultAction"]
        assert resolve(action, {"publicNetworkAccess": "Disabled"}) == "Deny"
        assert resolve(action, {"publicNetworkAccess": "Enabled"}) == "Allow"


@pytest.mark.parametrize(("private", "tier"), [(False, "Standard"), (True, "Premium")])
def test_service_bus_is_premium_only_with_private_networking(private: bool, tier: str) -> None:
    values = known(private)
    assert resolve(module(MAIN, "serviceBus")["params"]["skuName"], values) == tier
    units = module(MAIN, "serviceBus")["params"]["premiumMessagingUnits"]
    assert render(units) == "serviceBusPremiumMessagingUnits"


def test_endpoints_cover_the_four_services_with_their_zones() -> None:
    values = known(True)
    endpoints = values["privateEndpoints"]
    found = set()
    for endpoint in endpoints:
        # resourceId('<type>', names.<service>), as render writes it.
        service = render(endpoint["serviceId"])
        kind, name = service.removeprefix("resource_id(").removesuffix(")").split(", ")
        found.add((kind.strip("'"), name, endpoint["groupId"], endpoint["zone"]))
    assert found == EXPECTED_ENDPOINTS
    keys = [endpoint["key"] for endpoint in endpoints]
    assert len(keys) == len(set(keys))
    # Azure OpenAI: the account's endpoint, in both of its zones.
    openai = module(MAIN, "openAIPrivateEndpoint")["params"]
    assert render(openai["serviceId"]) == "openAIAccount.outputs.id"
    assert openai["groupId"] == "account"
    assert [render(zone) for zone in openai["privateDnsZoneIds"]] == [
        "network.outputs.zoneIds.openAI",
        "network.outputs.zoneIds.cognitiveServices",
    ]
    allowed = decorator(params(PRIVATE_ENDPOINT)["groupId"], "allowed")
    assert {group for *_, group, _ in EXPECTED_ENDPOINTS} | {"account"} <= set(allowed)


def test_the_network_creates_each_zone_and_links_it() -> None:
    variables = constants(NETWORK)
    assert resolve(variables["zoneNames"], variables) == ZONES
    assert sorted(resolve(variables["zoneList"], variables)) == sorted(ZONES.values())
    links = resources_of_type(NETWORK, "Microsoft.Network/privateDnsZones/virtualNetworkLinks")
    (link,) = links.values()
    assert render(resource_body(link)["properties"]["virtualNetwork"]["id"]) == "vnet.id"


def test_the_app_subnet_is_delegated_to_flex_consumption() -> None:
    (vnet,) = resources_of_type(NETWORK, "Microsoft.Network/virtualNetworks").values()
    subnets = {
        subnet["name"]: subnet["properties"]
        for subnet in resource_body(vnet)["properties"]["subnets"]
    }
    (delegation,) = subnets["snet-app"]["delegations"]
    assert delegation["properties"]["serviceName"] == "Microsoft.App/environments"
    assert "delegations" not in subnets["snet-private-endpoints"]
    # Internet-bound calls leave through the NAT gateway (no default outbound access).
    assert render(subnets["snet-app"]["natGateway"]["id"]) == "natGateway.id"
    (nat,) = resources_of_type(NETWORK, "Microsoft.Network/natGateways").values()
    addresses = resource_body(nat)["properties"]["publicIpAddresses"]
    assert [render(address["id"]) for address in addresses] == ["natAddress.id"]


@pytest.mark.parametrize("private", [False, True])
def test_the_site_joins_the_app_subnet_only_with_private_networking(private: bool) -> None:
    passed = module(MAIN, "functionApp")["params"]["virtualNetworkSubnetId"]
    values = {**known(private), "network.outputs.appSubnetId": "/subnets/snet-app"}
    chosen = resolve(passed["operator"]["operands"]["condition"], values)
    assert chosen is private
    (site,) = resources_of_type(FUNCTION_APP, "Microsoft.Web/sites").values()
    value = resource_body(site)["properties"]["virtualNetworkSubnetId"]
    assert resolve(value, {"virtualNetworkSubnetId": ""}) is None
    assert resolve(value, {"virtualNetworkSubnetId": "/subnets/snet-app"}) == "/subnets/snet-app"


def test_the_readme_explains_the_option_and_no_text_denies_flex_vnet_integration() -> None:
    readme = read(INFRA / "README.md")
    section = readme.split("### Private networking", 1)[1].split("\n### ", 1)[0]
    for needed in ("privateNetworking", "Premium", "webhook", "Microsoft.App/environments"):
        assert needed in section, needed
    for path in [INFRA / "README.md", MAIN, *MODULES.glob("*.bicep")]:
        assert "has no VNet integration" not in read(path), path
