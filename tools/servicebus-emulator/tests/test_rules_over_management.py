"""add-rule / remove-rule / enumerate-rules on a subscription's $management node.

The Python SDK manages rules only through the HTTP administration client, which cannot
reach this emulator; these operations are driven through the SDK's own $management
request/response channel (the receiver's ``_mgmt_request_response_with_retry``), so the
wire format is still the SDK's.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from azure.servicebus._common import mgmt_handlers
from azure.servicebus.exceptions import ServiceBusError

from servicebus_emulator.process import ServiceBusEmulator

pytestmark = pytest.mark.emulator
TOPIC, SUBSCRIPTION = "rules-sync", "none"  # a topic of its own; starts with one 1=0 rule


def _text(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return {_text(k): _text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value


def manage_rules(connection_string: str) -> dict[str, Any]:
    outcome: dict[str, Any] = {}
    with ServiceBusClient.from_connection_string(connection_string) as client:
        receiver = client.get_subscription_receiver(
            TOPIC, SUBSCRIPTION, receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
        )
        with receiver:

            def call(operation: bytes, body: dict[str, Any]) -> Any:
                return receiver._mgmt_request_response_with_retry(
                    operation, body, mgmt_handlers.default, timeout=10
                )

            description = {
                "sql-filter": {"expression": "tier = 'gold'"},
                "sql-rule-action": {"expression": "SET seen = TRUE"},
            }
            call(b"com.microsoft:add-rule", {"rule-name": "gold", "rule-description": description})
            with pytest.raises(ServiceBusError):
                call(
                    b"com.microsoft:add-rule",
                    {
                        "rule-name": "bad",
                        "rule-description": {"sql-filter": {"expression": "tier = "}},
                    },
                )
            outcome["rules"] = _text(call(b"com.microsoft:enumerate-rules", {"skip": 0, "top": 10}))
            with client.get_topic_sender(TOPIC) as sender:
                sender.send_messages(
                    [
                        ServiceBusMessage("gold", application_properties={"tier": "gold"}),
                        ServiceBusMessage("tin", application_properties={"tier": "tin"}),
                    ]
                )
            outcome["received"] = receiver.receive_messages(max_message_count=2, max_wait_time=3)
            call(b"com.microsoft:remove-rule", {"rule-name": "gold"})
            outcome["after_remove"] = _text(
                call(b"com.microsoft:enumerate-rules", {"skip": 0, "top": 10})
            )
    return outcome


async def test_rules_can_be_added_enumerated_and_removed(test_emulator: ServiceBusEmulator) -> None:
    outcome = await asyncio.wait_for(
        asyncio.to_thread(manage_rules, test_emulator.connection_string), 120
    )
    names = [rule["rule-description"]["rule-name"] for rule in outcome["rules"]["rules"]]
    assert names == ["never", "gold"]
    gold = outcome["rules"]["rules"][1]["rule-description"]
    assert gold["sql-filter"] == {"expression": "tier = 'gold'"}
    received: list[Any] = outcome["received"]
    assert [str(m) for m in received] == ["gold"]
    assert received[0].application_properties[b"seen"] is True
    remaining = [rule["rule-description"]["rule-name"] for rule in outcome["after_remove"]["rules"]]
    assert remaining == ["never"]
