"""SDK received messages as ``azure.functions.ServiceBusMessage`` (the non-SDK binding)."""

from __future__ import annotations

from typing import Any

from azure.functions.servicebus import ServiceBusMessage  # noqa: TID251 (the worker's type)
from azure.servicebus import ServiceBusReceivedMessage


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def to_function_message(message: ServiceBusReceivedMessage) -> ServiceBusMessage:
    properties = {
        str(_text(key)): _text(value)
        for key, value in (message.application_properties or {}).items()
    }
    body = b"".join(message.body) if not isinstance(message.body, bytes) else message.body
    metadata = {
        "MessageId": message.message_id,
        "DeliveryCount": message.delivery_count,
        "SequenceNumber": message.sequence_number,
        "LockToken": str(message.lock_token) if message.lock_token else None,
        "UserProperties": properties,
        "ApplicationProperties": properties,
    }
    return ServiceBusMessage(
        body=body,
        trigger_metadata=metadata,
        application_properties=properties,
        content_type=message.content_type,
        correlation_id=message.correlation_id,
        dead_letter_error_description=message.dead_letter_error_description,
        dead_letter_reason=message.dead_letter_reason,
        dead_letter_source=message.dead_letter_source,
        delivery_count=message.delivery_count,
        enqueued_sequence_number=message.enqueued_sequence_number,
        enqueued_time_utc=message.enqueued_time_utc,
        expires_at_utc=message.expires_at_utc,
        label=message.subject,
        locked_until=message.locked_until_utc,
        lock_token=str(message.lock_token) if message.lock_token else None,
        message_id=str(message.message_id),
        partition_key=message.partition_key,
        reply_to=message.reply_to,
        reply_to_session_id=message.reply_to_session_id,
        scheduled_enqueue_time_utc=message.scheduled_enqueue_time_utc,
        sequence_number=message.sequence_number,
        session_id=message.session_id,
        state=int(message.state) if message.state is not None else None,
        subject=message.subject,
        time_to_live=message.time_to_live,
        to=message.to,
        transaction_partition_key=None,
        user_properties=properties,
    )
