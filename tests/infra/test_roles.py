"""Role assignments: documented built-in ids, named constants, least-privilege scopes."""

import re
from pathlib import Path

import pytest

from tests.infra import (
    MODULES,
    Expression,
    Resource,
    bicep_files,
    read,
    resources,
    resources_of_type,
    variable,
)

ROLE_FILE = MODULES / "role-definitions.bicep"

# Built-in role definition ids as published in
# https://learn.microsoft.com/azure/role-based-access-control/built-in-roles
# (sections Integration, Storage and Monitor).
DOCUMENTED_ROLE_IDS = {
    "Azure Service Bus Data Owner": "090c5cfd-751d-490a-894a-3ce6f1109419",
    "Azure Service Bus Data Receiver": "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
    "Azure Service Bus Data Sender": "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
    "Storage Blob Data Owner": "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
    "Storage Blob Data Contributor": "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
    "Storage Queue Data Contributor": "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
    "EventGrid Data Sender": "d5a91429-5739-47e2-a06b-3470a27159e7",
    "Monitoring Metrics Publisher": "3913510d-42f4-4e42-8a64-420c390055eb",
}

# The Bicep constant name of each role.
CONSTANT_FOR_ROLE = {
    "Azure Service Bus Data Owner": "serviceBusDataOwner",
    "Azure Service Bus Data Receiver": "serviceBusDataReceiver",
    "Azure Service Bus Data Sender": "serviceBusDataSender",
    "Storage Blob Data Owner": "storageBlobDataOwner",
    "Storage Blob Data Contributor": "storageBlobDataContributor",
    "Storage Queue Data Contributor": "storageQueueDataContributor",
    "EventGrid Data Sender": "eventGridDataSender",
    "Monitoring Metrics Publisher": "monitoringMetricsPublisher",
}

# Where each role may be assigned (resource types of the assignment scope).
ALLOWED_SCOPES = {
    "serviceBusDataReceiver": {"Microsoft.ServiceBus/namespaces/queues"},
    "serviceBusDataSender": {
        "Microsoft.ServiceBus/namespaces/queues",
        "Microsoft.ServiceBus/namespaces/topics",
    },
    "serviceBusDataOwner": {"Microsoft.ServiceBus/namespaces/queues"},
    # The host account (Functions host) and the container the blob trigger reads.
    "storageBlobDataOwner": {
        "Microsoft.Storage/storageAccounts",
        "Microsoft.Storage/storageAccounts/blobServices/containers",
    },
    "storageQueueDataContributor": {"Microsoft.Storage/storageAccounts"},
    "storageBlobDataContributor": {"Microsoft.Storage/storageAccounts/blobServices/containers"},
    "eventGridDataSender": {"Microsoft.EventGrid/topics"},
    "monitoringMetricsPublisher": {"Microsoft.Insights/components"},
}

_GUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


def role_constants() -> dict[str, str]:
    constants: dict[str, str] = variable(read(ROLE_FILE), "roleDefinitionIds")
    return constants


@pytest.mark.parametrize("role", sorted(DOCUMENTED_ROLE_IDS))
def test_constant_is_the_documented_id(role: str) -> None:
    assert role_constants()[CONSTANT_FOR_ROLE[role]] == DOCUMENTED_ROLE_IDS[role]


def test_every_constant_is_a_documented_role() -> None:
    assert set(role_constants()) == set(CONSTANT_FOR_ROLE.values())


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: p.name)
def test_guids_appear_only_as_named_constants(path: Path) -> None:
    if path == ROLE_FILE:
        return
    assert not _GUID.search(read(path)), f"{path.name} hard-codes a GUID; use roleDefinitionIds"


def role_assignments() -> list[tuple[Path, Resource, dict[str, Resource]]]:
    found = []
    for path in bicep_files():
        text = read(path)
        symbols = {resource.symbol: resource for resource in resources(text)}
        for assignment in resources_of_type(text, "Microsoft.Authorization/roleAssignments"):
            found.append((path, assignment, symbols))
    return found


def test_there_are_role_assignments() -> None:
    assert len(role_assignments()) >= 10


@pytest.mark.parametrize("entry", role_assignments(), ids=lambda e: f"{e[0].stem}.{e[1].symbol}")
def test_assignment_uses_a_constant_at_an_allowed_scope(
    entry: tuple[Path, Resource, dict[str, Resource]],
) -> None:
    path, assignment, symbols = entry
    definition = assignment.body["properties"]["roleDefinitionId"]
    match = re.fullmatch(
        r"subscriptionResourceId\('Microsoft\.Authorization/roleDefinitions',\s*"
        r"roleDefinitionIds\.(\w+)\)",
        definition.text if isinstance(definition, Expression) else "",
    )
    assert match, f"{assignment.symbol}: role must come from roleDefinitionIds"
    constant = match.group(1)
    assert constant in role_constants()
    scope = assignment.body["scope"]
    assert isinstance(scope, Expression)
    scope_symbol = re.sub(r"\[\w+\]$", "", scope.text)
    assert scope_symbol in symbols, f"{assignment.symbol}: scope {scope.text} is not a resource"
    scope_type = symbols[scope_symbol].type
    assert scope_type in ALLOWED_SCOPES[constant], (
        f"{path.name}:{assignment.symbol} grants {constant} on {scope_type}"
    )
    assert assignment.body["properties"]["principalType"] == "ServicePrincipal"


def _grants(constant: str) -> list[tuple[str, Resource]]:
    """(file name, scope resource) of every assignment of one role constant."""
    found = []
    for path, assignment, symbols in role_assignments():
        if (
            f"roleDefinitionIds.{constant})"
            in assignment.body["properties"]["roleDefinitionId"].text
        ):
            scope = re.sub(r"\[\w+\]$", "", assignment.body["scope"].text)
            found.append((path.name, symbols[scope]))
    return found


def test_blob_data_owner_on_the_host_account_and_the_trigger_container_only() -> None:
    """Owner where the Functions host needs it, and where the blob trigger reads.

    Microsoft documents Storage Blob Data Owner for an identity-based blob trigger; the
    trigger reads one container of the data account, so the grant stops there.
    """
    owners = sorted((name, scope.type) for name, scope in _grants("storageBlobDataOwner"))
    assert owners == [
        ("storage-data.bicep", "Microsoft.Storage/storageAccounts/blobServices/containers"),
        ("storage-host.bicep", "Microsoft.Storage/storageAccounts"),
    ]
    (data_scope,) = [scope for name, scope in _grants("storageBlobDataOwner") if "data" in name]
    assert data_scope.body["name"] == Expression("dataContainers.incoming")


def test_queue_data_contributor_on_both_accounts_for_the_host_and_the_blob_trigger() -> None:
    """The host's queues (AzureWebJobsStorage) and the blob trigger's poison queue, which
    the blobs extension keeps in the account of the trigger's connection."""
    contributors = sorted(
        (name, scope.type) for name, scope in _grants("storageQueueDataContributor")
    )
    assert contributors == [
        ("storage-data.bicep", "Microsoft.Storage/storageAccounts"),
        ("storage-host.bicep", "Microsoft.Storage/storageAccounts"),
    ]


def test_trigger_container_is_the_incoming_container_and_waits_for_it() -> None:
    text = read(MODULES / "storage-data.bicep")
    symbols = {resource.symbol: resource for resource in resources(text)}
    container = symbols["incomingContainer"]
    assert container.existing
    assert container.body["name"] == Expression("dataContainers.incoming")
    (owner,) = [
        a
        for a in resources_of_type(text, "Microsoft.Authorization/roleAssignments")
        if a.symbol == "blobTriggerOwner"
    ]
    # An existing reference carries no dependency on the loop that creates the container.
    assert owner.body["dependsOn"] == [Expression("appContainers")]


def test_app_containers_get_contributor_one_by_one() -> None:
    text = read(MODULES / "storage-data.bicep")
    (per_container,) = [
        a
        for a in resources_of_type(text, "Microsoft.Authorization/roleAssignments")
        if a.symbol == "appContainerContributor"
    ]
    assert per_container.is_loop
    assert per_container.body["scope"] == Expression("appContainers[i]")
