"""Event Grid: topics, the second-stage subscriptions, filters, retries and dead-letters."""

from typing import Any

from tests.infra import (
    INFRA,
    MODULES,
    constants,
    is_reference,
    literal,
    params,
    render,
    resolve,
    resource_body,
    resources_of_type,
)

TOPICS = MODULES / "eventgrid-topics.bicep"
SUBSCRIPTIONS = MODULES / "eventgrid-subscriptions.bicep"
SECOND_STAGE = INFRA / "eventgrid-subscriptions.bicep"


def _subscriptions() -> dict[str, Any]:
    found = {}
    for kind in ("systemTopics", "topics"):
        subscriptions = resources_of_type(
            SUBSCRIPTIONS, f"Microsoft.EventGrid/{kind}/eventSubscriptions"
        )
        for resource in subscriptions.values():
            body = resource_body(resource)
            found[body["name"]] = body["properties"]
    return found


def _dead_letter() -> dict[str, Any]:
    dead_letter: dict[str, Any] = constants(SUBSCRIPTIONS)["deadLetter"]
    return dead_letter


def _properties(resource_type: str) -> dict[str, Any]:
    (resource,) = resources_of_type(TOPICS, resource_type).values()
    properties: dict[str, Any] = resource_body(resource)["properties"]
    return properties


def test_custom_topic_takes_cloudevents() -> None:
    assert _properties("Microsoft.EventGrid/topics")["inputSchema"] == "CloudEventSchemaV1_0"


def test_system_topic_watches_the_data_account() -> None:
    properties = _properties("Microsoft.EventGrid/systemTopics")
    assert properties["topicType"] == "Microsoft.Storage.StorageAccounts"
    assert is_reference(properties["source"], "dataStorageAccountId")


def test_blob_function_name_defaults_to_blob_intake() -> None:
    assert params(SECOND_STAGE)["blobFunctionName"]["default"] == "blob_intake"
    assert params(SUBSCRIPTIONS)["blobFunctionName"]["default"] == "blob_intake"


def test_blob_created_goes_to_the_blobs_extension_of_blob_intake() -> None:
    blob = _subscriptions()["blob-intake"]
    url = blob["destination"]["properties"]["endpointUrl"]
    assert isinstance(literal(url), list), "the URL interpolates the host, function and key"
    rendered = resolve(
        url,
        {
            "appHostName": "app.azurewebsites.net",
            "blobFunctionName": params(SUBSCRIPTIONS)["blobFunctionName"]["default"],
            "blobsExtensionKey": "KEY",
        },
    )
    assert rendered == (
        "https://app.azurewebsites.net/runtime/webhooks/blobs"
        "?functionName=Host.Functions.blob_intake&code=KEY"
    )
    assert blob["destination"]["endpointType"] == "WebHook"


def test_blob_created_is_filtered_to_the_incoming_container() -> None:
    known = constants(SUBSCRIPTIONS)
    blob_filter = resolve(_subscriptions()["blob-intake"]["filter"], known)
    assert blob_filter["includedEventTypes"] == ["Microsoft.Storage.BlobCreated"]
    assert blob_filter["subjectBeginsWith"] == "/blobServices/default/containers/incoming/"


def test_every_subscription_retries_and_dead_letters_with_identity() -> None:
    subscriptions = _subscriptions()
    assert set(subscriptions) == {"blob-intake", "app-terminal-results", "app-review-required"}
    for name, properties in subscriptions.items():
        assert is_reference(properties["retryPolicy"], "retryPolicy"), name
        assert is_reference(properties["deadLetterWithResourceIdentity"], "deadLetter"), name
        assert "deadLetterDestination" not in properties, f"{name} would dead-letter with keys"
    known = constants(SUBSCRIPTIONS)
    dead_letter = _dead_letter()
    assert dead_letter["identity"]["type"] == "UserAssigned"
    destination = dead_letter["deadLetterDestination"]
    assert destination["endpointType"] == "StorageBlob"
    assert resolve(destination["properties"]["blobContainerName"], known) == "eventgrid-deadletters"
    retry = resolve(known["retryPolicy"], known)
    assert retry == {"maxDeliveryAttempts": 30, "eventTimeToLiveInMinutes": 1440}


def test_result_subscriptions_use_cloudevents_and_advanced_filters() -> None:
    subscriptions = _subscriptions()
    terminal = subscriptions["app-terminal-results"]
    assert terminal["eventDeliverySchema"] == "CloudEventSchemaV1_0"
    (status_filter,) = terminal["filter"]["advancedFilters"]
    assert status_filter["operatorType"] == "StringIn"
    assert status_filter["key"] == "data.status"
    assert {"completed", "failed"} <= set(status_filter["values"])
    review = subscriptions["app-review-required"]
    assert review["eventDeliverySchema"] == "CloudEventSchemaV1_0"
    assert review["filter"]["advancedFilters"] == [
        {"operatorType": "BoolEquals", "key": "data.review_required", "value": True}
    ]


def test_result_webhook_is_the_app_events_route() -> None:
    for name in ("app-terminal-results", "app-review-required"):
        destination = _subscriptions()[name]["destination"]["properties"]
        assert render(destination) == (
            "union({endpointUrl: 'https://${appHostName}/api/${eventsRoute}?code=${functionKey}',"
            " maxEventsPerBatch: 1, preferredBatchSizeInKilobytes: 64,"
            " minimumTlsVersionAllowed: '1.2'}, entraDelivery)"
        )
    assert params(SECOND_STAGE)["eventsRoute"]["default"] == "v1/events"


def test_app_may_publish_to_the_custom_topic() -> None:
    (assignment,) = resources_of_type(TOPICS, "Microsoft.Authorization/roleAssignments").values()
    body = resource_body(assignment)
    assert is_reference(body["scope"], "topic")
    assert "roleDefinitionIds.eventGridDataSender)" in render(
        body["properties"]["roleDefinitionId"]
    )
