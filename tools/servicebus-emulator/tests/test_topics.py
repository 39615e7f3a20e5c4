"""Topic fan-out through SQL, correlation and false filters, and rule actions."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from azure.servicebus import ServiceBusMessage, ServiceBusReceiveMode

from emulator_sdk import Sdk
from servicebus_emulator.process import ServiceBusEmulator

pytestmark = pytest.mark.emulator
SUBSCRIPTIONS = ("high", "review", "all", "model", "corr-sys", "none", "mixed", "action")


def message(
    name: str, subject: str | None = None, correlation_id: str | None = None, **props: object
) -> ServiceBusMessage:
    return ServiceBusMessage(
        name,
        application_properties=props,  # type: ignore[arg-type]
        subject=subject,
        correlation_id=correlation_id,
        content_type="application/json" if correlation_id else None,
        message_id=str(uuid.uuid4()),
    )


async def peek_names(client: Sdk, topic: str, subscription: str) -> list[str]:
    """Bodies waiting on a subscription, without settling them."""
    async with client.get_subscription_receiver(topic, subscription) as receiver:
        return sorted(str(m) for m in await receiver.peek_messages(max_message_count=50))


async def test_fan_out_applies_each_subscription_filter(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    topic = entity("fanout")
    async with client.get_topic_sender(topic) as sender:
        await sender.send_messages(
            [
                message("urgent", priority="high"),
                message("routine", priority="low", review_required=False),
                message("needs-eyes", review_required=True, tenant="t9"),
                message("analyzer", model_name="local-analyzer", tenant="t1"),
                message("analyzer-skip", model_name="local-analyzer", tenant="t2", skip=1),
                message("invoice", subject="invoice-7", correlation_id="c-42", size=6),
                message("small-invoice", subject="invoice-8", size=5),
            ]
        )
    expected = {
        "high": ["urgent"],
        "review": ["needs-eyes"],
        "all": sorted(
            [
                "urgent",
                "routine",
                "needs-eyes",
                "analyzer",
                "analyzer-skip",
                "invoice",
                "small-invoice",
            ]
        ),
        "model": ["analyzer", "analyzer-skip"],
        "corr-sys": [],  # needs Label 'invoice' exactly, not 'invoice-7'
        "none": [],
        # (size * 2 > 10 AND sys.Label LIKE 'inv%') OR tenant IN ('t1','t2') AND NOT EXISTS(skip)
        "mixed": ["analyzer", "invoice"],
        "action": ["routine", "urgent"],
    }
    counts = {
        sub: test_emulator.runtime_properties(f"{topic}/Subscriptions/{sub}")[
            "active_message_count"
        ]
        for sub in expected
    }
    assert counts == {sub: len(names) for sub, names in expected.items()}
    for subscription in ("mixed", "model", "action", "review"):
        assert await peek_names(client, topic, subscription) == expected[subscription], subscription


async def test_correlation_filter_on_system_properties_and_rule_action(
    client: Sdk, entity: Callable[[str], str]
) -> None:
    topic = entity("filters")
    async with client.get_topic_sender(topic) as sender:
        await sender.send_messages(message("exact", subject="invoice", correlation_id="c-42"))
        await sender.send_messages(message("tagged", priority="mid", secret="s3cr3t"))
    async with client.get_subscription_receiver(topic, "corr-sys") as receiver:
        (matched,) = await receiver.receive_messages(max_wait_time=5)
        assert str(matched) == "exact"
        await receiver.complete_message(matched)
    async with client.get_subscription_receiver(topic, "action") as receiver:
        (tagged,) = await receiver.receive_messages(max_wait_time=5)
        assert str(tagged) == "tagged"
        props = {
            k.decode() if isinstance(k, bytes) else k: v
            for k, v in tagged.application_properties.items()
        }
        assert props.get("routed") in ("yes", b"yes")
        assert "secret" not in props
        await receiver.complete_message(tagged)
    async with client.get_subscription_receiver(topic, "all") as receiver:
        got = await receiver.receive_messages(max_message_count=2, max_wait_time=5)
        for received in got:
            await receiver.complete_message(received)
        assert sorted(str(m) for m in got) == ["exact", "tagged"]


async def test_subscription_dead_letter_queue(
    client: Sdk, entity: Callable[[str], str], test_emulator: ServiceBusEmulator
) -> None:
    topic = entity("topicdlq")
    async with client.get_topic_sender(topic) as sender:
        await sender.send_messages(message("bad-result", priority="high"))
    async with client.get_subscription_receiver(topic, "high") as receiver:
        (received,) = await receiver.receive_messages(max_wait_time=5)
        await receiver.dead_letter_message(
            received, reason="Rejected", error_description="consumer said no"
        )
    assert (
        test_emulator.runtime_properties(f"{topic}/Subscriptions/high")["dead_letter_message_count"]
        == 1
    )
    async with client.get_subscription_receiver(topic, "high", sub_queue="deadletter") as dlq:
        (dead,) = await dlq.receive_messages(max_wait_time=5)
        assert (str(dead), dead.dead_letter_reason) == ("bad-result", "Rejected")
        await dlq.complete_message(dead)
    async with client.get_subscription_receiver(
        topic, "all", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as r:
        assert [str(m) for m in await r.receive_messages(max_wait_time=5)] == ["bad-result"]
