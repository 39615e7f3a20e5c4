"""The Event Grid namespace (the pull door): catalogue, local config, dead-letters, roles, settings.

infra/local/eventgrid-namespace.json is the local namespace emulator's config and the source
of truth for names and values: its topics and event subscriptions use the ARM property names
of ``Microsoft.EventGrid/namespaces/topics[/eventSubscriptions]``, so catalog.json's
``eventGridNamespace.topics`` must equal them once the local-only keys are dropped (the
top-level ``namespace.accessKey`` and each subscription's ``local``). Both directions are
checked: a topic, subscription, filter or delivery value present on one side only fails.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from shared.settings import EventGridPullSettings, Settings
from tests.infra import (
    CATALOG,
    FUNCTION_APP,
    INFRA,
    MAIN,
    MODULES,
    app_settings,
    bicep_files,
    constants,
    decorator,
    is_loop,
    is_reference,
    module,
    modules,
    outputs,
    params,
    read,
    render,
    resolve,
    resource_body,
    resources,
    resources_of_type,
    variables,
    without_comments,
)

NAMESPACE = MODULES / "eventgrid-namespace.bicep"
SUBSCRIPTIONS = MODULES / "eventgrid-namespace-subscriptions.bicep"
SECOND_STAGE = INFRA / "eventgrid-subscriptions.bicep"
LOCAL_CONFIG = INFRA / "local" / "eventgrid-namespace.json"

API_VERSION = "2025-02-15"  # the newest GA version of Microsoft.EventGrid/namespaces
NAMESPACE_TYPES = (
    "Microsoft.EventGrid/namespaces",
    "Microsoft.EventGrid/namespaces/topics",
    "Microsoft.EventGrid/namespaces/topics/eventSubscriptions",
)


# --- the local config and the catalogue ---------------------------------------------------


def local_topics(path: Path) -> list[dict[str, Any]]:
    """The local config's topics without its local-only keys."""
    assert path.is_file(), f"{path} is missing"
    document = json.loads(path.read_text(encoding="utf-8"))
    topics: list[dict[str, Any]] = copy.deepcopy(document["topics"])
    for topic in topics:
        for subscription in topic["eventSubscriptions"]:
            subscription.pop("local", None)
    return topics


def catalog() -> dict[str, Any]:
    """``eventGridNamespace`` as the namespace module loads it (loadJsonContent)."""
    known = constants(NAMESPACE)
    section: dict[str, Any] = resolve(known["eventGridNamespace"], known)
    return section


def subscriptions() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(topic, subscription) of every subscription in the catalogue."""
    return [
        (topic, subscription)
        for topic in catalog()["topics"]
        for subscription in topic["eventSubscriptions"]
    ]


def test_local_config_has_only_the_known_local_keys() -> None:
    """Nothing in the local config escapes the comparison except what is local by design."""
    document = json.loads(LOCAL_CONFIG.read_text(encoding="utf-8"))
    assert set(document) == {"$comment", "namespace", "topics"}
    assert set(document["namespace"]) == {"name", "accessKey"}
    for topic in document["topics"]:
        assert set(topic) == {"name", "properties", "eventSubscriptions"}, topic["name"]
        for subscription in topic["eventSubscriptions"]:
            assert set(subscription) <= {"name", "properties", "local"}, subscription["name"]


def test_catalog_equals_the_local_config_minus_local_keys() -> None:
    assert catalog()["topics"] == local_topics(LOCAL_CONFIG)


def test_comparison_notices_a_changed_filter(tmp_path: Path) -> None:
    """The comparison itself is not vacuous: one more event type is a difference."""
    document = json.loads(LOCAL_CONFIG.read_text(encoding="utf-8"))
    properties = document["topics"][0]["eventSubscriptions"][0]["properties"]
    properties["filtersConfiguration"]["includedEventTypes"].append("com.inferbus.Other")
    changed = tmp_path / "eventgrid-namespace.json"
    changed.write_text(json.dumps(document), encoding="utf-8")
    assert catalog()["topics"] != local_topics(changed)


def test_catalog_names_agree_with_the_topics() -> None:
    """catalog.json repeats the names the app and the roles use: they must agree."""
    section = catalog()
    by_name = {topic["name"]: topic for topic in section["topics"]}
    assert section["pullTopicName"] == "inference-requests"
    assert section["pullSubscriptionName"] == "app-pull"
    assert section["resultsTopicName"] == "inference-results"
    assert set(by_name) == {section["pullTopicName"], section["resultsTopicName"]}
    # app-pull is the pull topic's only subscription: the receiver role on that topic
    # reaches no other subscription.
    (pull,) = by_name[section["pullTopicName"]]["eventSubscriptions"]
    assert pull["name"] == section["pullSubscriptionName"]
    assert pull["properties"]["filtersConfiguration"]["includedEventTypes"] == [
        "com.inferbus.InferenceRequested"
    ]
    # The same names as the defaults the app reads.
    defaults = Settings().eventgrid_pull
    assert defaults.topic == section["pullTopicName"]
    assert defaults.subscription == section["pullSubscriptionName"]


def test_topics_take_cloudevents_from_custom_publishers() -> None:
    for topic in catalog()["topics"]:
        assert topic["properties"]["inputSchema"] == "CloudEventSchemaV1_0", topic["name"]
        assert topic["properties"]["publisherType"] == "Custom", topic["name"]
        assert 1 <= topic["properties"]["eventRetentionInDays"] <= 7, topic["name"]


def test_every_subscription_is_a_queue_subscription_in_cloudevents() -> None:
    """Pull delivery only: no push (webhook) subscription, which is preview on namespaces."""
    assert subscriptions()
    for _, subscription in subscriptions():
        properties = subscription["properties"]
        assert properties["eventDeliverySchema"] == "CloudEventSchemaV1_0"
        delivery = properties["deliveryConfiguration"]
        assert delivery["deliveryMode"] == "Queue", subscription["name"]
        assert "push" not in delivery
        queue = delivery["queue"]
        assert 60 <= queue["receiveLockDurationInSeconds"] <= 300
        assert 1 <= queue["maxDeliveryCount"] <= 10
        assert "deadLetterDestinationWithResourceIdentity" not in queue, (
            "the dead-letter destination is computed by Bicep, not written in the catalogue"
        )


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?")


def _seconds(duration: str) -> int:
    match = _DURATION.fullmatch(duration)
    assert match, f"unsupported ISO 8601 duration {duration!r}"
    assert duration not in ("P", "PT"), f"empty ISO 8601 duration {duration!r}"
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def test_no_subscription_outlives_its_topic_retention() -> None:
    """eventTimeToLive may not exceed the topic's eventRetentionInDays.

    https://learn.microsoft.com/azure/event-grid/event-retention
    """
    too_long = [
        f"{topic['name']}/{subscription['name']}"
        for topic, subscription in subscriptions()
        if _seconds(subscription["properties"]["deliveryConfiguration"]["queue"]["eventTimeToLive"])
        > topic["properties"]["eventRetentionInDays"] * 86400
    ]
    assert not too_long, f"TTL above the topic's retention: {too_long}"


def test_duration_reader() -> None:
    assert _seconds("P1D") == 86400
    assert _seconds("P7D") == 7 * 86400
    assert _seconds("PT23H12M") == 23 * 3600 + 12 * 60
    assert _seconds("P0DT1H0M30S") == 3630


# --- the namespace module deploys the catalogue ------------------------------------------


def _one(path: Path, resource_type: str) -> dict[str, Any]:
    (resource,) = resources_of_type(path, resource_type).values()
    return resource


def test_namespace_resources_use_the_ga_api_version() -> None:
    for path in bicep_files():
        for symbol, resource in resources(path).items():
            if resource["type"] in NAMESPACE_TYPES:
                assert resource["api_version"] == API_VERSION, f"{path.name}:{symbol}"


def test_namespace_is_standard_tls12_entra_identity_and_without_mqtt() -> None:
    body = resource_body(_one(NAMESPACE, "Microsoft.EventGrid/namespaces"))
    assert body["sku"]["name"] == "Standard"
    assert is_reference(body["sku"]["capacity"], "capacity")
    assert params(NAMESPACE)["capacity"]["default"] == 1
    properties = body["properties"]
    # Exactly the documented NamespaceProperties this template sets. There is no
    # disableLocalAuth on namespaces (2025-02-15, nor 2025-07-15-preview): writing one would
    # look like a control while doing nothing.
    assert set(properties) == {
        "isZoneRedundant",
        "publicNetworkAccess",
        "minimumTlsVersionAllowed",
        "topicSpacesConfiguration",
    }
    assert properties["minimumTlsVersionAllowed"] == "1.2"
    assert not is_reference(properties["minimumTlsVersionAllowed"])
    assert properties["topicSpacesConfiguration"] == {"state": "Disabled"}
    assert is_reference(properties["isZoneRedundant"], "isZoneRedundant")
    assert is_reference(properties["publicNetworkAccess"], "publicNetworkAccess")
    access = params(NAMESPACE)["publicNetworkAccess"]
    assert access["default"] == "Enabled"
    assert decorator(access, "allowed") == ["Enabled", "Disabled"]
    assert body["identity"]["type"] == "UserAssigned"
    assert list(body["identity"]["userAssignedIdentities"]) == ["'${eventGridIdentityId}'"]


def test_main_wires_the_namespace_parameters_and_identities() -> None:
    passed = module(MAIN, "eventGridNamespace")["params"]
    assert render(passed["isZoneRedundant"]) == (
        "(eventGridNamespaceZoneRedundant && zoneRedundant)"
    ), "zone redundancy only where the region has availability zones"
    # The parameter's own choice, unless private networking disables public access.
    access = passed["publicNetworkAccess"]
    known = constants(MAIN)
    assert resolve(access, {**known, "eventGridNamespacePublicNetworkAccess": "Enabled"}) == (
        "Enabled"
    )
    assert resolve(access, {**known, "eventGridNamespacePublicNetworkAccess": "Disabled"}) == (
        "Disabled"
    )
    assert (
        resolve(
            access,
            {
                **known,
                "privateNetworking": True,
                "eventGridNamespacePublicNetworkAccess": "Enabled",
            },
        )
        == "Disabled"
    )
    assert render(passed["eventGridIdentityId"]) == "identities.outputs.eventGridIdentityId"
    assert render(passed["dataStorageAccountId"]) == "dataStorage.outputs.id"
    assert render(passed["appPrincipalId"]) == "identities.outputs.appIdentityPrincipalId"
    main_params = params(MAIN)
    assert main_params["eventGridNamespaceZoneRedundant"]["default"] is True
    assert main_params["eventGridNamespacePublicNetworkAccess"]["default"] == "Enabled"
    assert render(variables(MAIN)["names"]["eventGridNamespace"]) == (
        "'evgns-${environmentName}-${token}'"
    )


def test_module_deploys_catalogue_topics_and_subscriptions_unchanged() -> None:
    topics = _one(NAMESPACE, "Microsoft.EventGrid/namespaces/topics")
    assert is_loop(topics)
    assert render(topics["config"]["loop_type"]["detail"]["array_name"]) == (
        "eventGridNamespace.topics"
    )
    assert render(resource_body(topics)["name"]) == "topic.name"
    assert render(resource_body(topics)["properties"]) == "topic.properties"
    per_topic = modules(NAMESPACE)["topicSubscriptions"]
    assert per_topic["detail"]["path"] == SUBSCRIPTIONS.name
    passed = resource_body(per_topic)["params"]
    assert render(passed["topicName"]) == "topics[i].name"
    assert render(passed["subscriptions"]) == "topic.eventSubscriptions"
    assert render(passed["eventGridIdentityId"]) == "eventGridIdentityId"
    assert render(passed["dataStorageAccountId"]) == "dataStorageAccountId"
    deployed = _one(SUBSCRIPTIONS, "Microsoft.EventGrid/namespaces/topics/eventSubscriptions")
    assert is_loop(deployed)
    assert render(deployed["config"]["loop_type"]["detail"]["array_name"]) == "subscriptions"
    assert render(resource_body(deployed)["name"]) == "subscription.name"


def _deployed_properties(subscription: dict[str, Any]) -> dict[str, Any]:
    """What the subscriptions module deploys for one catalogue subscription."""
    deployed = _one(SUBSCRIPTIONS, "Microsoft.EventGrid/namespaces/topics/eventSubscriptions")
    known = constants(SUBSCRIPTIONS)
    known.update(
        {
            "subscription": subscription,
            "eventGridIdentityId": "EVENTGRID-IDENTITY",
            "dataStorageAccountId": "DATA-ACCOUNT",
        }
    )
    properties: dict[str, Any] = resolve(resource_body(deployed)["properties"], known)
    return properties


def test_every_queue_subscription_dead_letters_to_the_container_with_the_identity() -> None:
    expected = {
        "identity": {"type": "UserAssigned", "userAssignedIdentity": "EVENTGRID-IDENTITY"},
        "deadLetterDestination": {
            "endpointType": "StorageBlob",
            "properties": {
                "resourceId": "DATA-ACCOUNT",
                "blobContainerName": "eventgrid-deadletters",
            },
        },
    }
    for _, subscription in subscriptions():
        deployed = _deployed_properties(subscription)
        queue = deployed["deliveryConfiguration"]["queue"]
        assert queue["deadLetterDestinationWithResourceIdentity"] == expected, subscription["name"]
        # Everything else is the catalogue's, unchanged.
        del queue["deadLetterDestinationWithResourceIdentity"]
        assert deployed == subscription["properties"], subscription["name"]


def test_the_dead_letter_identity_is_the_namespace_identity() -> None:
    """deadLetterDestinationWithResourceIdentity uses an identity set on the namespace: the
    same user-assigned identity, which storage-data.bicep makes Storage Blob Data
    Contributor on the dead-letter container only."""
    body = resource_body(_one(NAMESPACE, "Microsoft.EventGrid/namespaces"))
    (key,) = body["identity"]["userAssignedIdentities"]
    passed = resource_body(modules(NAMESPACE)["topicSubscriptions"])["params"]
    assert key == f"'${{{render(passed['eventGridIdentityId'])}}}'"
    storage = MODULES / "storage-data.bicep"
    writer = resource_body(resources(storage)["deadLetterWriter"])
    assert is_reference(writer["scope"], "deadLetterContainer")
    assert is_reference(writer["properties"]["principalId"], "eventGridPrincipalId")
    storage_passed = module(MAIN, "dataStorage")["params"]
    assert render(storage_passed["eventGridPrincipalId"]) == (
        "identities.outputs.eventGridIdentityPrincipalId"
    )


# --- roles --------------------------------------------------------------------------------


def _assignments() -> dict[str, tuple[str, dict[str, Any]]]:
    """Role constant -> (scope symbol, scope resource body) of the namespace module."""
    symbols = resources(NAMESPACE)
    found = {}
    for assignment in resources_of_type(
        NAMESPACE, "Microsoft.Authorization/roleAssignments"
    ).values():
        body = resource_body(assignment)
        match = re.search(
            r"roleDefinitionIds\.(\w+)\)$", render(body["properties"]["roleDefinitionId"])
        )
        assert match
        assert is_reference(body["properties"]["principalId"], "appPrincipalId")
        scope = render(body["scope"])
        assert symbols[scope]["type"] == "Microsoft.EventGrid/namespaces/topics"
        assert symbols[scope]["existing"]
        assert body["dependsOn"] == ["topics"]
        found[match.group(1)] = (scope, resource_body(symbols[scope]))
    return found


def test_app_has_the_two_data_roles_each_on_its_namespace_topic() -> None:
    assignments = _assignments()
    assert set(assignments) == {"eventGridDataReceiver", "eventGridDataSender"}
    receiver_scope, receiver_topic = assignments["eventGridDataReceiver"]
    sender_scope, sender_topic = assignments["eventGridDataSender"]
    assert render(receiver_topic["name"]) == "eventGridNamespace.pullTopicName"
    assert render(sender_topic["name"]) == "eventGridNamespace.resultsTopicName"
    assert is_reference(receiver_topic["parent"], "namespace")
    assert is_reference(sender_topic["parent"], "namespace")
    assert receiver_scope != sender_scope


def test_receiver_is_granted_nowhere_else() -> None:
    grants = [
        path.name
        for path in bicep_files()
        if "roleDefinitionIds.eventGridDataReceiver" in read(path)
    ]
    assert grants == [NAMESPACE.name]


# --- local authentication -------------------------------------------------------------------


def test_namespace_keys_are_never_read_or_configured() -> None:
    """The namespace keys cannot be disabled (no disableLocalAuth on namespaces): nothing
    reads them, and no key-based pull setting reaches Azure."""
    for path in (NAMESPACE, SUBSCRIPTIONS, MAIN):
        code = without_comments(read(path))
        assert "listKeys" not in code, path.name
    settings = app_settings()
    key_settings = [
        name for name in settings if name.startswith("EventGridPull__") and "key" in name.lower()
    ]
    assert not key_settings
    assert EventGridPullSettings.model_fields["key"].json_schema_extra == {"where": "local"}


def test_second_stage_subscribes_no_namespace_topic() -> None:
    """Webhook push from namespace topics is preview: stage 2 stays on the custom topic."""
    for resource in resources(SECOND_STAGE).values():
        assert not resource["type"].startswith("Microsoft.EventGrid/namespaces")
    assert "namespace" not in read(MODULES / "eventgrid-subscriptions.bicep").lower()


# --- the app settings of the pull door ----------------------------------------------------


def test_pull_settings_come_from_the_namespace_module_outputs() -> None:
    settings = app_settings()
    assert is_reference(
        settings["EventGridPull__namespaceEndpoint"], "eventGridPullNamespaceEndpoint"
    )
    assert is_reference(settings["EventGridPull__topicName"], "eventGridPullTopicName")
    assert is_reference(
        settings["EventGridPull__subscriptionName"], "eventGridPullSubscriptionName"
    )
    assert is_reference(settings["EventGridPull__clientId"], "appIdentityClientId")
    for name in (
        "eventGridPullNamespaceEndpoint",
        "eventGridPullTopicName",
        "eventGridPullSubscriptionName",
    ):
        assert params(FUNCTION_APP)[name]["default"] is None, f"{name} must come from main"
    passed = module(MAIN, "functionApp")["params"]
    assert render(passed["eventGridPullNamespaceEndpoint"]) == "eventGridNamespace.outputs.endpoint"
    assert render(passed["eventGridPullTopicName"]) == "eventGridNamespace.outputs.pullTopicName"
    assert render(passed["eventGridPullSubscriptionName"]) == (
        "eventGridNamespace.outputs.pullSubscriptionName"
    )


def test_namespace_outputs_are_the_endpoint_and_the_catalogue_names() -> None:
    declared = outputs(NAMESPACE)
    assert (
        render(declared["endpoint"])
        == "'https://${namespace.properties.topicsConfiguration.hostname}'"
    )
    known = constants(NAMESPACE)
    symbols = resources(NAMESPACE)
    known["pullTopic"] = {"name": resource_body(symbols["pullTopic"])["name"]}
    known["resultsTopic"] = {"name": resource_body(symbols["resultsTopic"])["name"]}
    assert resolve(declared["pullTopicName"], known) == "inference-requests"
    assert resolve(declared["pullSubscriptionName"], known) == "app-pull"
    assert resolve(declared["resultsTopicName"], known) == "inference-results"
    main_outputs = outputs(MAIN)
    assert (
        render(main_outputs["eventGridNamespaceEndpoint"]) == "eventGridNamespace.outputs.endpoint"
    )


def test_results_go_to_the_custom_topic_unless_the_namespace_is_chosen() -> None:
    assert params(MAIN)["publishResultsToNamespace"]["default"] is False
    passed = module(MAIN, "functionApp")["params"]
    assert render(passed["eventGridTopicEndpoint"]) == (
        "(publishResultsToNamespace ? eventGridNamespace.outputs.endpoint"
        " : eventGrid.outputs.topicEndpoint)"
    )
    assert render(passed["eventGridNamespaceTopic"]) == (
        "(publishResultsToNamespace ? eventGridNamespace.outputs.resultsTopicName : '')"
    )
    settings = app_settings()
    assert is_reference(settings["EventGridTopic__namespaceTopic"], "eventGridNamespaceTopic")
    assert params(FUNCTION_APP)["eventGridNamespaceTopic"]["default"] == ""


def test_catalog_file_declares_the_namespace_section() -> None:
    document = json.loads(CATALOG.read_text(encoding="utf-8"))
    assert set(document["eventGridNamespace"]) == {
        "pullTopicName",
        "pullSubscriptionName",
        "resultsTopicName",
        "topics",
    }
