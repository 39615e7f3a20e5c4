"""The operators' data roles: optional, least privilege, each on its container or entity.

``main.bicep`` deploys ``modules/operator-roles.bicep`` for ``operatorPrincipalId`` (azd: the
signed-in principal, ``AZURE_PRINCIPAL_ID``) and nothing when it is empty. The module's
assignments are expanded here as ARM would deploy them (loops over the catalog's entities,
the names of their scopes from ``catalog.json``) and compared with what the commands of
``python -m shared.ops`` do (docs/operations.md, "Roles for operators").
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

import pytest
from pycep import BicepParser

from tests.infra import (
    CATALOG,
    INFRA,
    MAIN,
    MODULES,
    REPO_ROOT,
    ROLE_DEFINITIONS,
    BicepElement,
    bicep_files,
    constants,
    decorator,
    has_default,
    is_loop,
    is_reference,
    modules,
    params,
    read,
    render,
    resolve,
    resource_body,
    resources,
    resources_of_type,
    variables,
    walk,
    without_comments,
)

OPERATOR_ROLES = MODULES / "operator-roles.bicep"
BICEPPARAM = INFRA / "main.bicepparam"
ASSIGNMENT = "Microsoft.Authorization/roleAssignments"
PRINCIPAL_TYPES = ["User", "Group", "ServicePrincipal"]

CONTAINER = "Microsoft.Storage/storageAccounts/blobServices/containers"
QUEUE = "Microsoft.ServiceBus/namespaces/queues"
TOPIC = "Microsoft.ServiceBus/namespaces/topics"
SUBSCRIPTION = "Microsoft.ServiceBus/namespaces/topics/subscriptions"

OWNER = "Storage Blob Data Owner"
CONTRIBUTOR = "Storage Blob Data Contributor"
READER = "Storage Blob Data Reader"
RECEIVER = "Azure Service Bus Data Receiver"
SENDER = "Azure Service Bus Data Sender"

Scope = tuple[str, str]  # (resource type, its name below the account or namespace)
Grant = tuple[str, Scope]  # (built-in role name, scope)


def _catalog() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(read(CATALOG))
    return document


def _container(name: str) -> Scope:
    return CONTAINER, f"default/{name}"


def expected_grants() -> set[Grant]:
    """What the commands do, role by role (modules/operator-roles.bicep says why)."""
    catalog = _catalog()
    containers = catalog["dataContainers"]
    topic = catalog["resultsTopicName"]
    grants: set[Grant] = {
        # usage --from-jobs and jobs reindex (the job index's tags), and every job a
        # replay writes
        (OWNER, _container(containers["jobs"])),
        # usage: the ledger's month documents, listed and read
        (READER, _container(containers["usage"])),
        # Event Grid replay through intake: claim checks, Idempotency-Key markers
        (CONTRIBUTOR, _container(containers["inputs"])),
        (CONTRIBUTOR, _container(containers["idempotency"])),
        # both replays' markers
        (CONTRIBUTOR, _container(containers["ledgers"])),
        # a BlobCreated event's document, read where it landed
        (READER, _container(containers["incoming"])),
        # Event Grid's dead letters
        (CONTRIBUTOR, _container(containers["eventGridDeadLetters"])),
        # a subscription's replay goes to the topic
        (SENDER, (TOPIC, topic)),
    }
    for queue in catalog["serviceBusQueues"]:
        # list, show and purge a queue's dead letters; replay to it (and intake's send)
        grants |= {(RECEIVER, (QUEUE, queue["name"])), (SENDER, (QUEUE, queue["name"]))}
    for subscription in catalog["resultsTopic"]["subscriptions"]:
        grants.add((RECEIVER, (SUBSCRIPTION, f"{topic}/{subscription['name']}")))
    return grants


# --- the module, expanded ---------------------------------------------------------------------


def _role_names() -> dict[str, str]:
    document: dict[str, Any] = json.loads(read(ROLE_DEFINITIONS))
    names: dict[str, str] = document["roleNames"]
    return names


def _role_constant(body: dict[str, Any]) -> str:
    match = re.fullmatch(
        r"subscription_resource_id\('Microsoft\.Authorization/roleDefinitions', "
        r"roleDefinitionIds\.(\w+)\)",
        render(body["properties"]["roleDefinitionId"]),
    )
    assert match, f"the role must come from roleDefinitionIds: {body['properties']}"
    return match.group(1)


def _loop_items(
    resource: dict[str, Any], known: dict[str, Any]
) -> tuple[dict[str, str], list[Any]]:
    """The loop's names (item_name, index_name) and the items it runs over (a constant)."""
    detail: dict[str, str] = resource["config"]["loop_type"]["detail"]
    array = str(detail["array_name"])
    assert array in known, f"a loop over {array}, which is not a constant of the module"
    items = resolve(BicepElement(array), known)
    assert isinstance(items, list)
    return detail, items


def _scope(expression: Any, known: dict[str, Any]) -> Scope:
    """The resource type of a scope (``x`` or ``x[i]``) and its name from below its root,
    parent by parent (the root is the account or namespace the module is given)."""
    symbols = resources(OPERATOR_ROLES)
    match = re.fullmatch(r"(\w+)(?:\[(\w+)\])?", render(expression))
    assert match, f"scope {render(expression)} is not a resource of the module"
    symbol, index = match.groups()
    scope_type = symbols[symbol]["type"]
    position = resolve(BicepElement(index), known) if index else None
    names: list[str] = []
    while True:
        resource = symbols[symbol]
        assert resource["existing"], f"{symbol}: the module creates nothing but role assignments"
        local = dict(known)
        if is_loop(resource):
            detail, items = _loop_items(resource, known)
            assert position is not None, f"{symbol} is a loop: its scope needs an index"
            local[detail["item_name"]] = items[position]
        body = resource_body(resource)
        if "parent" not in body:
            assert is_reference(body["name"]), f"{symbol}: the root is named by a parameter"
            break
        names.append(resolve(body["name"], local))
        assert is_reference(body["parent"]), f"{symbol}: its parent is one resource"
        symbol, position = str(body["parent"]), None
    return scope_type, "/".join(reversed(names))


Deployed = tuple[str, dict[str, Any], dict[str, Any]]  # (symbol, body, the loop's bindings)


def deployed_assignments() -> list[Deployed]:
    """Every role assignment of the module, one per loop item, with its loop bindings."""
    known = constants(OPERATOR_ROLES)
    found: list[Deployed] = []
    for symbol, assignment in resources_of_type(OPERATOR_ROLES, ASSIGNMENT).items():
        body = resource_body(assignment)
        if not is_loop(assignment):
            found.append((symbol, body, {}))
            continue
        assert assignment["config"]["condition"] is None, f"{symbol}: the module is the condition"
        detail, items = _loop_items(assignment, known)
        for position, item in enumerate(items):
            bindings = {detail["item_name"]: item, detail["index_name"]: position}
            found.append((symbol, body, bindings))
    return found


def granted() -> list[Grant]:
    known = constants(OPERATOR_ROLES)
    names = _role_names()
    return [
        (names[_role_constant(body)], _scope(body["scope"], {**known, **bindings}))
        for _, body, bindings in deployed_assignments()
    ]


def test_operator_grants_are_exactly_what_the_commands_do() -> None:
    grants = granted()
    assert len(grants) == len(set(grants)), "one assignment per role and scope"
    assert set(grants) == expected_grants()


def test_every_entity_the_commands_reach_is_in_the_catalog() -> None:
    """sb-deadletters works on every request queue (all three lanes by default) and every
    results subscription: the loops run over the catalog's lists of them."""
    catalog = _catalog()
    assert {q["name"] for q in catalog["serviceBusQueues"]} == set(catalog["queueNames"].values())
    assert catalog["resultsTopic"]["name"] == catalog["resultsTopicName"]
    loops = {
        symbol: str(
            resources(OPERATOR_ROLES)[symbol]["config"]["loop_type"]["detail"]["array_name"]
        )
        for symbol in ("queueReceivers", "queueSenders", "subscriptionReceivers")
    }
    assert loops == {
        "queueReceivers": "serviceBusQueues",
        "queueSenders": "serviceBusQueues",
        "subscriptionReceivers": "resultsSubscriptions",
    }
    declared = {name: render(value) for name, value in variables(OPERATOR_ROLES).items()}
    assert declared["serviceBusQueues"] == "load_json_content('catalog.json', '$.serviceBusQueues')"
    assert declared["resultsSubscriptions"] == (
        "load_json_content('catalog.json', '$.resultsTopic.subscriptions')"
    )


def test_never_the_account_the_namespace_or_a_role_beyond_data() -> None:
    scope_types = {scope[0] for _, scope in granted()}
    assert scope_types == {CONTAINER, QUEUE, TOPIC, SUBSCRIPTION}
    roles = {role for role, _ in granted()}
    assert roles == {OWNER, CONTRIBUTOR, READER, RECEIVER, SENDER}
    # Manage (Data Owner) stays the app's: intake's backlog probe fails open without it.
    assert "serviceBusDataOwner" not in without_comments(read(OPERATOR_ROLES))


def test_blob_data_owner_only_where_the_job_index_is() -> None:
    owners = [scope for role, scope in granted() if role == OWNER]
    assert owners == [_container(_catalog()["dataContainers"]["jobs"])]


@pytest.mark.parametrize(
    "entry", deployed_assignments(), ids=lambda e: f"{e[0]}{e[2].get('i', '')}"
)
def test_principal_and_its_type_come_from_the_parameters(entry: Deployed) -> None:
    _, body, _ = entry
    assert is_reference(body["properties"]["principalId"], "principalId")
    assert is_reference(body["properties"]["principalType"], "principalType")


@pytest.mark.parametrize(
    "entry", deployed_assignments(), ids=lambda e: f"{e[0]}{e[2].get('i', '')}"
)
def test_name_is_a_guid_of_scope_principal_and_role(entry: Deployed) -> None:
    """Deterministic: a redeploy finds the same assignment, and the app's own assignment of
    the same role on the same scope (another principal) has another name."""
    symbol, body, _ = entry
    scope = render(body["scope"])
    assert render(body["name"]) == (
        f"guid({scope}.id, principalId, roleDefinitionIds.{_role_constant(body)})"
    ), symbol


def test_module_parameters() -> None:
    declared = params(OPERATOR_ROLES)
    assert set(declared) == {
        "principalId",
        "principalType",
        "dataStorageAccountName",
        "serviceBusNamespaceName",
    }
    assert not has_default(declared["principalId"])
    assert declared["principalType"]["default"] == "User"
    assert decorator(declared["principalType"], "allowed") == PRINCIPAL_TYPES
    roots = {
        render(resource_body(resource)["name"])
        for resource in resources(OPERATOR_ROLES).values()
        if resource["existing"] and "parent" not in resource_body(resource)
    }
    assert roots == {"dataStorageAccountName", "serviceBusNamespaceName"}


# --- main.bicep: optional, and nothing without it -----------------------------------------------


def test_main_parameters_default_to_no_grant() -> None:
    declared = params(MAIN)
    assert declared["operatorPrincipalId"]["default"] == ""
    assert declared["operatorPrincipalType"]["default"] == "User"
    assert decorator(declared["operatorPrincipalType"], "allowed") == PRINCIPAL_TYPES


def _holds(condition: Any, known: dict[str, Any]) -> bool:
    """A module condition: what ``resolve`` evaluates, and ``!`` over it."""
    if isinstance(condition, dict) and condition.get("operator", {}).get("type") == "not":
        return not _holds(condition["operator"]["operands"]["bool_value"], known)
    return bool(resolve(condition, known))


def _operator_module() -> dict[str, Any]:
    found = [
        item
        for item in modules(MAIN).values()
        if item["detail"]["path"] == "modules/operator-roles.bicep"
    ]
    assert len(found) == 1, "main.bicep deploys the operators' roles once"
    return found[0]


@pytest.mark.parametrize(
    ("principal", "deployed"),
    [("", False), ("operator-object-id", True)],
    ids=["empty", "set"],
)
def test_the_roles_are_deployed_only_for_a_principal(principal: str, deployed: bool) -> None:
    known = {**constants(MAIN), "operatorPrincipalId": principal}
    assert _holds(_operator_module()["config"]["condition"], known) is deployed


def test_the_module_gets_the_parameters_and_the_deployed_resources() -> None:
    passed = {
        name: render(value) for name, value in resource_body(_operator_module())["params"].items()
    }
    # The outputs of the modules that create the containers and the entities: the
    # assignments wait for them.
    assert passed == {
        "principalId": "operatorPrincipalId",
        "principalType": "operatorPrincipalType",
        "dataStorageAccountName": "dataStorage.outputs.name",
        "serviceBusNamespaceName": "serviceBus.outputs.name",
    }
    assert modules(MAIN)["dataStorage"]["detail"]["path"] == "modules/storage-data.bicep"
    assert modules(MAIN)["serviceBus"]["detail"]["path"] == "modules/servicebus.bicep"


def test_no_operator_role_outside_the_module() -> None:
    """With the parameter empty the module is not deployed, and nothing else grants it."""
    assert not resources_of_type(MAIN, ASSIGNMENT)
    mentions = [
        path.name for path in bicep_files() if "operatorPrincipal" in without_comments(read(path))
    ]
    assert mentions == ["main.bicep"]
    given = sorted(
        symbol
        for symbol, item in modules(MAIN).items()
        if any(
            is_reference(value, "operatorPrincipalId")
            or is_reference(value, "operatorPrincipalType")
            for value in walk(resource_body(item))
        )
    )
    assert given == ["operatorRoles"]


# --- main.bicepparam: azd grants its signed-in principal --------------------------------------

_READ_ENV = re.compile(r"readEnvironmentVariable\(\s*'(\w+)'\s*(?:,\s*'((?:[^'\\]|\\.)*)'\s*)?\)")


def _bicep_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${")
    return f"'{escaped}'"


def bicepparam_value(name: str, environment: dict[str, str]) -> Any:
    """A parameter of main.bicepparam as azd compiles it with ``environment``: each
    ``readEnvironmentVariable`` (innermost first) is its variable or its default, and a
    missing variable without a default fails, as the compilation does."""
    text = read(BICEPPARAM)
    (expression,) = re.findall(rf"^param\s+{name}\s*=\s*(.+)$", text, re.MULTILINE)

    def value(match: re.Match[str]) -> str:
        variable, default = match.group(1), match.group(2)
        if variable in environment:
            return _bicep_string(environment[variable])
        if default is None:
            raise KeyError(f"{name} needs {variable} in the environment")
        return f"'{default}'"

    while (replaced := _READ_ENV.sub(value, expression)) != expression:
        expression = replaced
    assert "readEnvironmentVariable" not in expression, expression
    parsed = cast(dict[str, Any], BicepParser().parse(text=f"var value = {expression}\n"))
    return resolve(parsed["variables"]["value"]["value"], {})


@pytest.mark.parametrize(
    ("environment", "principal", "principal_type"),
    [
        ({}, "", "User"),
        ({"AZURE_PRINCIPAL_ID": "me"}, "me", "User"),
        (
            {"AZURE_PRINCIPAL_ID": "me", "INFERBUS_OPERATOR_PRINCIPAL_TYPE": "ServicePrincipal"},
            "me",
            "ServicePrincipal",
        ),
        (
            {
                "AZURE_PRINCIPAL_ID": "me",
                "INFERBUS_OPERATOR_PRINCIPAL_ID": "ops-group",
                "INFERBUS_OPERATOR_PRINCIPAL_TYPE": "Group",
            },
            "ops-group",
            "Group",
        ),
        ({"AZURE_PRINCIPAL_ID": "me", "INFERBUS_OPERATOR_ROLES": "off"}, "", "User"),
    ],
    ids=["bare", "azd-user", "azd-service-principal", "a-group", "off"],
)
def test_bicepparam_grants_the_azd_principal_unless_told_otherwise(
    environment: dict[str, str], principal: str, principal_type: str
) -> None:
    assert bicepparam_value("operatorPrincipalId", environment) == principal
    assert bicepparam_value("operatorPrincipalType", environment) == principal_type


def test_bicepparam_reads_azure_principal_id_with_a_default() -> None:
    """A deployment without AZURE_PRINCIPAL_ID (no azd, or an azd that sets none) compiles
    and grants nothing."""
    text = read(BICEPPARAM)
    (line,) = re.findall(r"^param\s+operatorPrincipalId\s*=.*$", text, re.MULTILINE)
    assert "readEnvironmentVariable('AZURE_PRINCIPAL_ID', '')" in line
    assert all(match.group(2) is not None for match in _READ_ENV.finditer(line))


# --- documentation ----------------------------------------------------------------------------


def test_operations_guide_names_the_parameter_and_each_role() -> None:
    text = read(REPO_ROOT / "docs" / "operations.md")
    section = text.split("## Roles for operators", 1)[1].split("\n## ", 1)[0]
    for needed in (
        "`operatorPrincipalId`",
        "`operatorPrincipalType`",
        OWNER,
        CONTRIBUTOR,
        RECEIVER,
        SENDER,
    ):
        assert needed in section, needed


def test_deploy_guide_says_how_to_grant_a_group_or_nothing() -> None:
    text = read(REPO_ROOT / "docs" / "deploy.md")
    for needed in (
        "AZURE_PRINCIPAL_ID",
        "INFERBUS_OPERATOR_PRINCIPAL_ID",
        "INFERBUS_OPERATOR_PRINCIPAL_TYPE Group",
        "INFERBUS_OPERATOR_ROLES off",
        "operatorPrincipalId=",
    ):
        assert needed in text, needed


def test_readme_lists_the_module() -> None:
    assert "operator-roles.bicep" in read(INFRA / "README.md")
