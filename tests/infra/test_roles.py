"""Role assignments: documented built-in ids, named constants, least-privilege scopes."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.infra import (
    MODULES,
    ROLE_DEFINITIONS,
    bicep_files,
    is_reference,
    read,
    render,
    resource_body,
    resources,
    resources_of_type,
    variables,
)
from tests.infra import (
    is_loop as _is_loop,
)

# Built-in role definition ids as published in
# https://learn.microsoft.com/azure/role-based-access-control/built-in-roles
# (sections Integration, Storage, Monitor and AI + machine learning).
DOCUMENTED_ROLE_IDS = {
    "Azure Service Bus Data Owner": "090c5cfd-751d-490a-894a-3ce6f1109419",
    "Azure Service Bus Data Receiver": "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
    "Azure Service Bus Data Sender": "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
    "Storage Blob Data Owner": "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
    "Storage Blob Data Contributor": "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
    "Storage Blob Data Reader": "2a2b9908-6ea1-4ae2-8e65-a410df84e7d1",
    "Storage Queue Data Contributor": "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
    "EventGrid Data Sender": "d5a91429-5739-47e2-a06b-3470a27159e7",
    "EventGrid Data Receiver": "78cbd9e7-9798-4e2e-9b5a-547d9ebb31fb",
    "Monitoring Metrics Publisher": "3913510d-42f4-4e42-8a64-420c390055eb",
    "Cognitive Services OpenAI User": "5e0bd9bd-7b93-4f28-af87-19fc36ad61bd",
}

# The Bicep constant name of each role.
CONSTANT_FOR_ROLE = {
    "Azure Service Bus Data Owner": "serviceBusDataOwner",
    "Azure Service Bus Data Receiver": "serviceBusDataReceiver",
    "Azure Service Bus Data Sender": "serviceBusDataSender",
    "Storage Blob Data Owner": "storageBlobDataOwner",
    "Storage Blob Data Contributor": "storageBlobDataContributor",
    "Storage Blob Data Reader": "storageBlobDataReader",
    "Storage Queue Data Contributor": "storageQueueDataContributor",
    "EventGrid Data Sender": "eventGridDataSender",
    "EventGrid Data Receiver": "eventGridDataReceiver",
    "Monitoring Metrics Publisher": "monitoringMetricsPublisher",
    "Cognitive Services OpenAI User": "cognitiveServicesOpenAIUser",
}

# The operators' data roles (a user, a group or a service principal, optional): the same
# roles at the same kinds of scope, tested in test_operator_roles.py.
OPERATOR_ROLES = MODULES / "operator-roles.bicep"

# Where each role may be assigned (resource types of the assignment scope).
ALLOWED_SCOPES = {
    # The request queues; an operator also receives a results subscription's dead letters.
    "serviceBusDataReceiver": {
        "Microsoft.ServiceBus/namespaces/queues",
        "Microsoft.ServiceBus/namespaces/topics/subscriptions",
    },
    "serviceBusDataSender": {
        "Microsoft.ServiceBus/namespaces/queues",
        "Microsoft.ServiceBus/namespaces/topics",
    },
    # Manage (runtime properties): each request queue and the results topic, never the namespace.
    "serviceBusDataOwner": {
        "Microsoft.ServiceBus/namespaces/queues",
        "Microsoft.ServiceBus/namespaces/topics",
    },
    # The host account (Functions host) and the container the blob trigger reads.
    "storageBlobDataOwner": {
        "Microsoft.Storage/storageAccounts",
        "Microsoft.Storage/storageAccounts/blobServices/containers",
    },
    "storageQueueDataContributor": {"Microsoft.Storage/storageAccounts"},
    "storageBlobDataContributor": {"Microsoft.Storage/storageAccounts/blobServices/containers"},
    # An operator reads the documents that landed in incoming (a BlobCreated replay).
    "storageBlobDataReader": {"Microsoft.Storage/storageAccounts/blobServices/containers"},
    # The custom topic, and the namespace topic the app may publish results to.
    "eventGridDataSender": {"Microsoft.EventGrid/topics", "Microsoft.EventGrid/namespaces/topics"},
    # The pull topic (namespace topic); never the namespace.
    "eventGridDataReceiver": {"Microsoft.EventGrid/namespaces/topics"},
    "monitoringMetricsPublisher": {"Microsoft.Insights/components"},
    # The Azure OpenAI account of the queue lane's model and the Global Batch lane; never
    # its resource group.
    "cognitiveServicesOpenAIUser": {"Microsoft.CognitiveServices/accounts"},
}

_GUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


def _role_file() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(read(ROLE_DEFINITIONS))
    return document


def role_constants() -> dict[str, str]:
    constants: dict[str, str] = _role_file()["roleDefinitionIds"]
    return constants


def test_role_file_names_each_constant_with_its_documented_role() -> None:
    names = _role_file()["roleNames"]
    assert names == {constant: role for role, constant in CONSTANT_FOR_ROLE.items()}


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: p.name)
def test_templates_take_role_ids_from_the_role_file_only(path: Path) -> None:
    """``roleDefinitionIds`` is loaded from role-definitions.json, never written inline."""
    declared = variables(path).get("roleDefinitionIds")
    uses = "roleDefinitionIds." in read(path)
    if declared is None:
        assert not uses, f"{path.name} uses roleDefinitionIds without loading them"
        return
    relative = ROLE_DEFINITIONS.relative_to(path.parent).as_posix()
    assert render(declared) == f"load_json_content('{relative}', '$.roleDefinitionIds')"


@pytest.mark.parametrize("role", sorted(DOCUMENTED_ROLE_IDS))
def test_constant_is_the_documented_id(role: str) -> None:
    assert role_constants()[CONSTANT_FOR_ROLE[role]] == DOCUMENTED_ROLE_IDS[role]


def test_every_constant_is_a_documented_role() -> None:
    assert set(role_constants()) == set(CONSTANT_FOR_ROLE.values())


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: p.name)
def test_guids_appear_only_as_named_constants(path: Path) -> None:
    assert not _GUID.search(read(path)), f"{path.name} hard-codes a GUID; use roleDefinitionIds"


Assignment = tuple[Path, str, dict[str, Any], dict[str, dict[str, Any]]]


def role_assignments() -> list[Assignment]:
    """(file, symbol, body, the file's resources) of every role assignment."""
    found = []
    for path in bicep_files():
        symbols = resources(path)
        for symbol, assignment in resources_of_type(
            path, "Microsoft.Authorization/roleAssignments"
        ).items():
            found.append((path, symbol, resource_body(assignment), symbols))
    return found


def test_there_are_role_assignments() -> None:
    assert len(role_assignments()) >= 10


def _role_constant(body: dict[str, Any]) -> str | None:
    """The constant X of ``subscriptionResourceId(<roleDefinitions>, roleDefinitionIds.X)``."""
    match = re.fullmatch(
        r"subscription_resource_id\('Microsoft\.Authorization/roleDefinitions', "
        r"roleDefinitionIds\.(\w+)\)",
        render(body["properties"]["roleDefinitionId"]),
    )
    return match.group(1) if match else None


def _scope_symbol(body: dict[str, Any]) -> str:
    """The resource symbol of the assignment's scope (``x`` or ``x[i]``)."""
    return re.sub(r"\[\w+\]$", "", render(body["scope"]))


@pytest.mark.parametrize("entry", role_assignments(), ids=lambda e: f"{e[0].stem}.{e[1]}")
def test_assignment_uses_a_constant_at_an_allowed_scope(entry: Assignment) -> None:
    path, symbol, body, symbols = entry
    constant = _role_constant(body)
    assert constant, f"{symbol}: role must come from roleDefinitionIds"
    assert constant in role_constants()
    scope_symbol = _scope_symbol(body)
    assert scope_symbol in symbols, f"{symbol}: scope {render(body['scope'])} is not a resource"
    scope_type = symbols[scope_symbol]["type"]
    assert scope_type in ALLOWED_SCOPES[constant], (
        f"{path.name}:{symbol} grants {constant} on {scope_type}"
    )
    principal_type = body["properties"]["principalType"]
    if path == OPERATOR_ROLES:
        assert is_reference(principal_type, "principalType")  # User, Group or ServicePrincipal
        return
    assert principal_type == "ServicePrincipal"
    assert not is_reference(principal_type)


def _grants(constant: str) -> list[tuple[str, dict[str, Any]]]:
    """(file name, scope resource) of every assignment of one role constant to the app's
    identities (the operators' are test_operator_roles.py's)."""
    return [
        (path.name, symbols[_scope_symbol(body)])
        for path, _, body, symbols in role_assignments()
        if _role_constant(body) == constant and path != OPERATOR_ROLES
    ]


def test_blob_data_owner_on_the_host_account_and_two_data_containers_only() -> None:
    """Owner where the Functions host needs it, where the blob trigger reads, and where
    the job index's tags are written and found.

    Microsoft documents Storage Blob Data Owner for an identity-based blob trigger; the
    trigger reads one container of the data account, so the grant stops there. Blob index
    tags (``blobs/tags/write``, ``blobs/filter/action``) are Owner's data actions, not
    Contributor's: the jobs container alone gets them.
    """
    owners = sorted((name, scope["type"]) for name, scope in _grants("storageBlobDataOwner"))
    container = "Microsoft.Storage/storageAccounts/blobServices/containers"
    assert owners == [
        ("storage-data.bicep", container),
        ("storage-data.bicep", container),
        ("storage-host.bicep", "Microsoft.Storage/storageAccounts"),
    ]
    data_scopes = [scope for name, scope in _grants("storageBlobDataOwner") if "data" in name]
    assert sorted(render(resource_body(scope)["name"]) for scope in data_scopes) == [
        "dataContainers.incoming",
        "dataContainers.jobs",
    ]


def test_queue_data_contributor_on_both_accounts_for_the_host_and_the_blob_trigger() -> None:
    """The host's queues (AzureWebJobsStorage) and the blob trigger's poison queue, which
    the blobs extension keeps in the account of the trigger's connection."""
    contributors = sorted(
        (name, scope["type"]) for name, scope in _grants("storageQueueDataContributor")
    )
    assert contributors == [
        ("storage-data.bicep", "Microsoft.Storage/storageAccounts"),
        ("storage-host.bicep", "Microsoft.Storage/storageAccounts"),
    ]


def test_trigger_container_is_the_incoming_container_and_waits_for_it() -> None:
    path = MODULES / "storage-data.bicep"
    container = resources(path)["incomingContainer"]
    assert container["existing"]
    assert render(resource_body(container)["name"]) == "dataContainers.incoming"
    owner = resources_of_type(path, "Microsoft.Authorization/roleAssignments")["blobTriggerOwner"]
    # An existing reference carries no dependency on the loop that creates the container.
    depends_on = resource_body(owner)["dependsOn"]
    assert depends_on == ["appContainers"]
    assert is_reference(depends_on[0])


def test_app_containers_get_contributor_one_by_one() -> None:
    path = MODULES / "storage-data.bicep"
    assignments = resources_of_type(path, "Microsoft.Authorization/roleAssignments")
    per_container = assignments["appContainerContributor"]
    assert _is_loop(per_container)
    assert render(resource_body(per_container)["scope"]) == "appContainers[i]"


def test_data_owner_on_every_request_queue_and_the_results_topic() -> None:
    """Queue counts come from runtime properties (Manage): every entity the app reads is
    granted on its own, so no queue (nor the topic's subscriptions) goes unread."""
    path = MODULES / "servicebus.bicep"
    assignments = resources_of_type(path, "Microsoft.Authorization/roleAssignments")
    owners = {
        symbol: body
        for symbol, body in ((s, resource_body(a)) for s, a in assignments.items())
        if _role_constant(body) == "serviceBusDataOwner"
    }
    assert sorted(owners) == ["backlogReaders", "topicRuntimeReader"]
    per_queue = assignments["backlogReaders"]
    assert _is_loop(per_queue)
    loop = per_queue["config"]
    assert loop["loop_type"]["detail"]["array_name"] == "serviceBusQueues"
    assert render(loop["condition"]) == "grantBacklogRead"
    assert render(owners["backlogReaders"]["scope"]) == "queues[i]"
    assert render(owners["backlogReaders"]["name"]) == (
        "guid(queues[i].id, appPrincipalId, roleDefinitionIds.serviceBusDataOwner)"
    )
    queues = resources(path)["queues"]
    assert queues["config"]["loop_type"]["detail"]["array_name"] == "serviceBusQueues"
    catalog = json.loads(read(MODULES / "catalog.json"))
    assert {queue["name"] for queue in catalog["serviceBusQueues"]} == set(
        catalog["queueNames"].values()
    ), "every request lane's queue is an entity of the loop"
    assert is_reference(owners["topicRuntimeReader"]["scope"], "topic")
    assert render(assignments["topicRuntimeReader"]["config"]["condition"]) == "grantBacklogRead"
    # Never the namespace: entity scope only.
    assert all(render(body["scope"]) != "namespace" for body in owners.values())
