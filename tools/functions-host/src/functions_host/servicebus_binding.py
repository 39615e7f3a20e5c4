"""Service Bus trigger data as the Functions host sends it to a worker.

SDK-type bindings (the runtime marks the trigger ``SupportsDeferredBinding``): each
message is a ``ModelBindingData`` whose content is the message's lock token (16 bytes,
the UUID in little-endian order, as the .NET SDK writes it), the marker
``x-opt-lock-token`` and the AMQP-encoded message; the extension in the worker decodes it
into ``azure.servicebus.ServiceBusReceivedMessage`` (see its ``utils.py``). A batch is a
``CollectionModelBindingData``.

Other bindings (``func.ServiceBusMessage``) get the body as bytes and the message's
properties as trigger metadata under the names the host uses (``MessageId``,
``DeliveryCount``, ``ApplicationProperties``...).

The delivery count is the one the .NET SDK gives the extension: deliveries including this
one (1 on the first). The broker's AMQP header counts the earlier attempts only (0 on the
first), which is what the Python SDK reports; .NET's ``AmqpMessageConverter`` adds 1 to the
header of every received (not peeked) message, and the extension passes that header on.

The received message is re-encoded from what the SDK decoded: AMQP timestamps and longs
come back from the decoder as plain ints and strings as bytes, so their AMQP types are put
back before encoding (the broker's timestamp annotations as timestamps, ints beyond 32
bits as longs, UTF-8 application property values as strings).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus._pyamqp._encode import encode_payload
from azure.servicebus._pyamqp.message import Header
from azure.servicebus._pyamqp.types import TYPE, VALUE, AMQPTypes

from functions_host.protos import messages

LOCK_TOKEN_MARKER = b"x-opt-lock-token"
MODEL_BINDING_SOURCE = "AzureServiceBusReceivedMessage"
MODEL_BINDING_CONTENT_TYPE = "application/octet-stream"
TIMESTAMP_ANNOTATIONS = {
    b"x-opt-enqueued-time",
    b"x-opt-locked-until",
    b"x-opt-scheduled-enqueue-time",
}
_INT32 = range(-(2**31), 2**31)


def _typed_annotation(key: Any, value: Any) -> Any:
    if key in TIMESTAMP_ANNOTATIONS and isinstance(value, int):
        return {TYPE: AMQPTypes.timestamp, VALUE: value}
    return _typed_value(value)


def _typed_value(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool) and value not in _INT32:
        return {TYPE: AMQPTypes.long, VALUE: value}
    return value


def _typed_property(value: Any) -> Any:
    if isinstance(value, bytes):
        try:
            return {TYPE: AMQPTypes.string, VALUE: value.decode("utf-8")}
        except UnicodeDecodeError:
            return value
    return _typed_value(value)


def extension_delivery_count(message: ServiceBusReceivedMessage) -> int:
    """Deliveries of ``message`` including this one, as the extension reports them."""
    return int(message.delivery_count or 0) + 1


def amqp_message_bytes(message: ServiceBusReceivedMessage) -> bytes:
    """The message's AMQP sections, encoded as the broker sent them (the delivery count
    as the extension counts it, see the module docstring)."""
    raw = message._message  # the decoded AMQP message the SDK keeps (pyamqp Message)
    header = (raw.header or Header())._replace(delivery_count=extension_delivery_count(message))
    typed = raw._replace(
        header=header,
        delivery_annotations=None,
        message_annotations={
            key: _typed_annotation(key, value)
            for key, value in (raw.message_annotations or {}).items()
        }
        or None,
        application_properties={
            key: _typed_property(value) for key, value in (raw.application_properties or {}).items()
        }
        or None,
    )
    output = bytearray()
    encode_payload(output, typed)
    return bytes(output)


def model_binding_data(message: ServiceBusReceivedMessage) -> Any:
    lock_token = uuid.UUID(str(message.lock_token))
    content = lock_token.bytes_le + LOCK_TOKEN_MARKER + amqp_message_bytes(message)
    return messages.ModelBindingData(
        version="1.0",
        source=MODEL_BINDING_SOURCE,
        content_type=MODEL_BINDING_CONTENT_TYPE,
        content=content,
    )


def sdk_trigger_data(batch: list[ServiceBusReceivedMessage], many: bool) -> Any:
    """TypedData for an SDK-type trigger: one message, or the whole batch."""
    if many:
        collection = messages.CollectionModelBindingData(
            model_binding_data=[model_binding_data(m) for m in batch]
        )
        return messages.TypedData(collection_model_binding_data=collection)
    return messages.TypedData(model_binding_data=model_binding_data(batch[0]))


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _json_safe(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _string(value: Any) -> Any:
    return messages.TypedData(string=_text(value))


def message_trigger_metadata(message: ServiceBusReceivedMessage) -> dict[str, Any]:
    """Trigger metadata of one message for ``func.ServiceBusMessage`` bindings."""
    properties = {
        _text(k): _json_safe(v) for k, v in (message.application_properties or {}).items()
    }
    # Numbers travel as JSON: the runtime reads no ``int`` TypedData in trigger metadata.
    metadata: dict[str, Any] = {
        "ApplicationProperties": messages.TypedData(json=json.dumps(properties)),
        "UserProperties": messages.TypedData(json=json.dumps(properties)),
        "DeliveryCount": messages.TypedData(json=str(extension_delivery_count(message))),
        "LockToken": _string(message.lock_token),
    }
    if message.sequence_number is not None:
        metadata["SequenceNumber"] = messages.TypedData(json=str(int(message.sequence_number)))
    optional = {
        "MessageId": message.message_id,
        "ContentType": message.content_type,
        "CorrelationId": message.correlation_id,
        "SessionId": message.session_id,
        "ReplyTo": message.reply_to,
        "ReplyToSessionId": message.reply_to_session_id,
        "To": message.to,
        "Subject": message.subject,
        "Label": message.subject,
        "PartitionKey": message.partition_key,
        "DeadLetterSource": message.dead_letter_source,
        "DeadLetterReason": message.dead_letter_reason,
        "DeadLetterErrorDescription": message.dead_letter_error_description,
    }
    for name, value in optional.items():
        if value is not None:
            metadata[name] = _string(value)
    times = {
        "EnqueuedTimeUtc": message.enqueued_time_utc,
        "ExpiresAtUtc": message.expires_at_utc,
        "LockedUntil": message.locked_until_utc,
        "ScheduledEnqueueTimeUtc": message.scheduled_enqueue_time_utc,
    }
    for name, moment in times.items():
        if moment is not None:
            metadata[name] = _string(moment.isoformat())
    return metadata


def message_body(message: ServiceBusReceivedMessage) -> bytes:
    body = message.body
    if isinstance(body, bytes | bytearray):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    return b"".join(bytes(part) for part in body)
