"""Dead letters of the results topic's subscriptions over in-memory ports: entity paths,
the copy sent to the topic, and the CLI's choice of entities."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.adapters.in_memory import RecordingSender
from shared.processing.dead_letters.queues import subscription_path, topic_subscription
from shared.processing.dead_letters.subscriptions import REPLAY_SUBSCRIPTION, result_copy
from tests.unit.test_deadletter_deadline_extension import run
from tests.unit.test_servicebus_deadletters import Harness, harness, item

__all__ = ["harness"]

ENTITY = "inference-results/subscriptions/audit"


def test_entity_paths_name_a_topic_and_a_subscription() -> None:
    assert subscription_path("inference-results", "audit") == ENTITY
    assert topic_subscription(ENTITY) == ("inference-results", "audit")
    assert topic_subscription("inference-requests") is None
    assert topic_subscription("/subscriptions/audit") is None


def test_the_copy_keeps_routing_names_its_subscription_and_drops_the_reason() -> None:
    dead = replace(
        item(4, queue=ENTITY, message_id="evt-1"),
        application_properties={"priority": "high", "DeadLetterReason": "x", "gone": None},
    )
    copy = result_copy(dead, "evt-1:replay:1")
    assert copy.message_id == "evt-1:replay:1"
    assert copy.body == dead.body
    assert copy.application_properties == {
        "priority": "high",
        "replay_of": "evt-1",
        REPLAY_SUBSCRIPTION: "audit",
    }
    with pytest.raises(ValueError, match="not a topic subscription"):
        result_copy(item(1), "x")


def test_a_subscriptions_message_is_replayed_to_its_topic_without_a_job(harness: Harness) -> None:
    harness.senders[ENTITY] = RecordingSender()
    dead = item(4, queue=ENTITY, body=b"not a request", message_id="evt-1")
    [outcome] = harness.operations.replay([dead])
    assert (outcome.status, outcome.detail) == (
        "replay",
        "as evt-1:replay:1 to inference-results for subscription audit",
    )
    assert harness.sent(ENTITY) == ["evt-1:replay:1"]
    [again] = harness.operations.replay([dead])
    assert again.status == "already-replayed"


def test_the_cli_takes_subscriptions_by_name_or_path_and_refuses_other_topics(
    harness: Harness, capsys: pytest.CaptureFixture[str]
) -> None:
    harness.put(item(4, queue=ENTITY, message_id="evt-1"), item(1))
    assert run(harness, "list", "--subscription", "audit") == 0
    out = capsys.readouterr().out
    assert f"1 dead-lettered messages in {ENTITY}" in out
    assert run(harness, "list", "--queue", ENTITY, "--queue", "standard") == 0
    assert f"2 dead-lettered messages in {ENTITY}, inference-requests" in capsys.readouterr().out
    assert run(harness, "list", "--queue", "other/subscriptions/audit") == 2
    assert "'other/subscriptions/audit' is not a subscription of the results topic" in (
        capsys.readouterr().err
    )
