"""The Event Grid publisher over the wire: what EventGridPublisherClient sends, and how
each answer of the service is classified."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.adapters.eventgrid import event_grid_publisher
from shared.errors import ConfigurationError, PermanentError, TransientError
from shared.events.announcements import Announcement, cloud_events
from shared.settings import Settings
from tests.support.http_recorder import Recorder, Reply, recording_server

pytestmark = pytest.mark.integration


@pytest.fixture
def topic() -> Iterator[Recorder]:
    with recording_server() as recorder:
        yield recorder


def publisher(topic: Recorder):  # type: ignore[no-untyped-def]
    settings = Settings.model_validate(
        {
            "EventGridTopic__topicEndpoint": f"{topic.base_url}/api/events",
            "EventGridTopic__topicKey": "local-key",
        }
    )
    built = event_grid_publisher(settings)
    assert built is not None
    return built


ANNOUNCEMENT = Announcement(
    request_id="r1",
    tenant_id="t1",
    model="local-analyzer",
    outcome="completed",
    priority="high",
    document_type="invoice",
    review_required=True,
    traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
)


def test_cloud_events_arrive_as_a_valid_batch(topic: Recorder) -> None:
    publisher(topic).publish(cloud_events(ANNOUNCEMENT))

    (request,) = topic.requests
    assert request.method == "POST"
    assert request.path == "/api/events"
    assert request.query["api-version"] == ["2018-01-01"]
    assert request.headers["content-type"] == "application/cloudevents-batch+json; charset=utf-8"
    assert request.headers["aeg-sas-key"] == "local-key"
    events = request.json()
    assert isinstance(events, list)
    assert len(events) == 2
    for event in events:
        assert event["specversion"] == "1.0"
        assert {"id", "source", "type", "subject", "time", "data"} <= set(event)
        assert event["source"] == "/inferbus/processor"
        assert event["traceparent"] == ANNOUNCEMENT.traceparent
        assert event["datacontenttype"] == "application/json"
    assert [e["type"] for e in events] == [
        "com.inferbus.InferenceCompleted",
        "com.inferbus.ContentClassified",
    ]
    assert events[0]["data"]["request_id"] == "r1"


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (429, TransientError),
        (503, TransientError),
        (400, PermanentError),
        (413, PermanentError),
        (401, ConfigurationError),
    ],
)
def test_service_answers_are_classified_for_the_retry_policy(
    topic: Recorder, status: int, error: type
) -> None:
    topic.default = lambda request: Reply(status, {"error": {"code": "x", "message": "refused"}})
    with pytest.raises(error):
        publisher(topic).publish(cloud_events(ANNOUNCEMENT))
    assert topic.requests, "the client reached the topic"


def test_an_unreachable_topic_is_transient() -> None:
    with recording_server() as gone:
        url = gone.base_url
    settings = Settings.model_validate(
        {"EventGridTopic__topicEndpoint": f"{url}/api/events", "EventGridTopic__topicKey": "k"}
    )
    built = event_grid_publisher(settings)
    assert built is not None
    with pytest.raises(TransientError):
        built.publish(cloud_events(ANNOUNCEMENT))


def test_no_endpoint_means_no_publisher() -> None:
    assert event_grid_publisher(Settings.model_validate({})) is None


def test_namespace_topics_receive_the_same_events_through_the_publish_api(topic: Recorder) -> None:
    settings = Settings.model_validate(
        {
            "EventGridTopic__topicEndpoint": topic.base_url,
            "EventGridTopic__topicKey": "namespace-key",
            "EventGridTopic__namespaceTopic": "results",
        }
    )
    built = event_grid_publisher(settings)
    assert built is not None
    topic.reply(Reply(200, {}))  # a namespace answers a publish with an empty JSON object
    built.publish(cloud_events(ANNOUNCEMENT))

    (request,) = topic.requests
    assert request.path == "/topics/results:publish"
    assert request.query["api-version"] == ["2024-06-01"]
    assert request.headers["content-type"].startswith("application/cloudevents-batch+json")
    assert request.headers["authorization"] == "SharedAccessKey namespace-key"
    events = request.json()
    assert [e["type"] for e in events] == [
        "com.inferbus.InferenceCompleted",
        "com.inferbus.ContentClassified",
    ]
    assert all(e["specversion"] == "1.0" and e["traceparent"] for e in events)
