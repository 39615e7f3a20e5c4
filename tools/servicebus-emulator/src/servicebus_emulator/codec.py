"""AMQP message sections: split what clients send, splice what the broker delivers.

The broker keeps every message as its encoded sections and only decodes the few it reads
(header, annotations, properties, application properties). Bodies are never decoded or
re-encoded, so whatever the client sent (data, sequence or value bodies) is delivered
byte for byte, and delivery costs one small annotation encode per message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proton import Data, Described, symbol, ubyte, uint, ulong

from .fastdecode import encode_annotations, encode_header
from .sections import (
    APPLICATION_PROPERTIES,
    DATA,
    DELIVERY_ANNOTATIONS,
    FOOTER,
    HEADER,
    MESSAGE_ANNOTATIONS,
    PROPERTIES,
    Lazy,
    fast_section,
    section_value,
    split_sections,
)

PROPERTY_FIELDS = (
    "message_id",
    "user_id",
    "to",
    "subject",
    "reply_to",
    "correlation_id",
    "content_type",
    "content_encoding",
    "absolute_expiry_time",
    "creation_time",
    "session_id",
    "group_sequence",
    "reply_to_session_id",
)


TIMESTAMP_ANNOTATIONS = frozenset(
    {"x-opt-enqueued-time", "x-opt-locked-until", "x-opt-scheduled-enqueue-time"}
)
INT_ANNOTATIONS = frozenset({"x-opt-message-state"})


def _encode(value: Any) -> bytes:
    data = Data()
    data.put_object(value)
    encoded: bytes = data.encode()
    return encoded


@dataclass
class StoredMessage:
    """An accepted message: its routing facts plus its untouched encoded sections."""

    properties: dict[str, Any] = field(default_factory=dict)
    application_properties: dict[Any, Any] = field(default_factory=dict)
    annotations: dict[Any, Any] = field(default_factory=dict)
    ttl_ms: int | None = None
    priority: int = 4
    durable: bool = False
    properties_raw: bytes = b""
    application_properties_raw: bytes | None = b""
    body_raw: bytes = b""
    footer_raw: bytes = b""
    size: int = 0

    @property
    def message_id(self) -> str | None:
        value = self.properties.get("message_id")
        return None if value is None else str(value)

    @property
    def session_id(self) -> str | None:
        value = self.properties.get("session_id")
        return None if value is None else str(value)

    def copy(self) -> StoredMessage:
        """An independent copy for fan-out: annotations and properties may diverge."""
        return StoredMessage(
            properties=dict(self.properties),
            application_properties=dict(self.application_properties),
            annotations=dict(self.annotations),
            ttl_ms=self.ttl_ms,
            priority=self.priority,
            durable=self.durable,
            properties_raw=self.properties_raw,
            application_properties_raw=self.application_properties_raw,
            body_raw=self.body_raw,
            footer_raw=self.footer_raw,
            size=self.size,
        )

    def set_application_properties(self, values: dict[Any, Any]) -> None:
        """Replace the application properties (rule actions and dead-letter reasons)."""
        self.application_properties = values
        self.application_properties_raw = None

    def encode(self, delivery_count: int, annotations: dict[str, Any]) -> bytes:
        """The message as delivered: explicit header (delivery-count even when 0) and
        the broker's annotations merged over the sender's."""
        if self.annotations:
            ttl = None if self.ttl_ms is None else uint(self.ttl_ms)
            header: Any = [self.durable, ubyte(self.priority), ttl, False, uint(delivery_count)]
            merged = dict(self.annotations)
            merged.update({symbol(k): v for k, v in annotations.items()})
            head = _encode(Described(ulong(HEADER), header))
            head += _encode(Described(ulong(MESSAGE_ANNOTATIONS), merged))
        else:
            head = encode_header(self.durable, self.priority, self.ttl_ms, delivery_count)
            head += encode_annotations(annotations, TIMESTAMP_ANNOTATIONS, INT_ANNOTATIONS)
        parts = [head, self.properties_raw]
        if self.application_properties_raw is None:
            props = {
                str(k) if isinstance(k, str) else k: v
                for k, v in self.application_properties.items()
            }
            self.application_properties_raw = (
                _encode(Described(ulong(APPLICATION_PROPERTIES), props)) if props else b""
            )
        parts += [self.application_properties_raw, self.body_raw, self.footer_raw]
        return b"".join(parts)


def parse_message(raw: bytes) -> StoredMessage:
    """Read one encoded message into a StoredMessage."""
    message = StoredMessage(size=len(raw))
    body: list[bytes] = []
    for code, lazy, encoded in split_sections(raw):
        if code in (DATA, DELIVERY_ANNOTATIONS) or code > APPLICATION_PROPERTIES:
            value = None
        elif code in (HEADER, PROPERTIES, APPLICATION_PROPERTIES) and lazy is Lazy:
            value = fast_section(code, encoded)
        else:
            value = section_value(lazy, encoded)
        if code == HEADER:
            fields = list(value or []) + [None] * 5
            message.durable = bool(fields[0])
            message.priority = 4 if fields[1] is None else int(fields[1])
            message.ttl_ms = None if fields[2] is None else int(fields[2])
        elif code == MESSAGE_ANNOTATIONS:
            message.annotations = value or {}
        elif code == PROPERTIES:
            values = list(value or [])
            message.properties = {
                name: values[i] for i, name in enumerate(PROPERTY_FIELDS) if i < len(values)
            }
            message.properties_raw = encoded
        elif code == APPLICATION_PROPERTIES:
            message.application_properties = value or {}
            message.application_properties_raw = encoded
        elif code == FOOTER:
            message.footer_raw = encoded
        elif code != DELIVERY_ANNOTATIONS:
            body.append(encoded)
    message.body_raw = b"".join(body)
    return message


def split_batch(raw: bytes) -> list[bytes] | None:
    """The inner messages of a batched send (format 0x80013700), or None if not a batch.

    Proton does not expose a delivery's message-format, so a batch is recognised by its
    shape: only data sections, each one itself an encoded message starting with a
    described section.
    """
    sections = split_sections(raw)
    inner = [_data_payload(v, encoded) for code, v, encoded in sections if code == DATA]
    has_only_batch_sections = all(
        code in (DATA, PROPERTIES, MESSAGE_ANNOTATIONS) for code, _, _ in sections
    )
    if not inner or not has_only_batch_sections:
        return None
    if not all(len(item) > 3 and item[0] == 0x00 and item[1] == 0x53 for item in inner):
        return None
    return inner


def _data_payload(value: Any, encoded: bytes) -> bytes:
    """The binary inside a data section (``00 53 75 a0|b0 size bytes``)."""
    if value is Lazy and len(encoded) > 4:
        return encoded[5:] if encoded[3] == 0xA0 else encoded[8:]
    return bytes(section_value(value, encoded))
