"""A small pure-Python AMQP decoder for the two sections the broker reads per message.

Properties and application properties are lists/maps of primitives; reading them here
costs a few microseconds, where a proton ``Data`` round trip through cffi costs tens.
Anything unusual (described values, arrays, nested lists) raises ``Unsupported`` and the
caller falls back to proton.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any


class Unsupported(ValueError):
    """An encoding this decoder leaves to proton."""


_FIXED: dict[int, Callable[[bytes], Any]] = {
    0x50: lambda b: b[0],
    0x51: lambda b: struct.unpack(">b", b)[0],
    0x52: lambda b: b[0],
    0x53: lambda b: b[0],
    0x54: lambda b: struct.unpack(">b", b)[0],
    0x55: lambda b: struct.unpack(">b", b)[0],
    0x56: lambda b: b[0] != 0,
    0x60: lambda b: struct.unpack(">H", b)[0],
    0x61: lambda b: struct.unpack(">h", b)[0],
    0x70: lambda b: struct.unpack(">I", b)[0],
    0x71: lambda b: struct.unpack(">i", b)[0],
    0x72: lambda b: struct.unpack(">f", b)[0],
    0x80: lambda b: struct.unpack(">Q", b)[0],
    0x81: lambda b: struct.unpack(">q", b)[0],
    0x82: lambda b: struct.unpack(">d", b)[0],
    0x83: lambda b: struct.unpack(">q", b)[0],
    0x98: lambda b: uuid.UUID(bytes=bytes(b)),
}
_WIDTH = {0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}
_EMPTY = {0x40: None, 0x41: True, 0x42: False, 0x43: 0, 0x44: 0}


def primitive(raw: bytes, pos: int) -> tuple[Any, int]:
    """Decode one primitive value at pos; returns (value, next position)."""
    code = raw[pos]
    pos += 1
    if code in _EMPTY:
        return _EMPTY[code], pos
    if code in _FIXED:
        width = _WIDTH[code >> 4]
        return _FIXED[code](raw[pos : pos + width]), pos + width
    if code in (0xA0, 0xA1, 0xA3):
        size = raw[pos]
        pos += 1
    elif code in (0xB0, 0xB1, 0xB3):
        size = int.from_bytes(raw[pos : pos + 4], "big")
        pos += 4
    else:
        raise Unsupported(hex(code))
    chunk = raw[pos : pos + size]
    value: Any = bytes(chunk) if code in (0xA0, 0xB0) else chunk.decode("utf-8")
    return value, pos + size


_SIZE_WIDTH = {0xA: 1, 0xB: 4, 0xC: 1, 0xD: 4, 0xE: 1, 0xF: 4}


def skip_value(raw: bytes | bytearray, pos: int) -> int:
    """The position just after the (possibly described or compound) value at pos.

    Needs no knowledge of the type: an AMQP constructor's high nibble says how wide the
    value or its size field is, so any value can be stepped over without decoding it.
    """
    code = raw[pos]
    pos += 1
    if code == 0x00:  # described: descriptor, then the value
        return skip_value(raw, skip_value(raw, pos))
    category = code >> 4
    if category == 0x4:
        return pos
    if category in _WIDTH:
        return pos + _WIDTH[category]
    if category in _SIZE_WIDTH:
        width = _SIZE_WIDTH[category]
        return pos + width + int.from_bytes(raw[pos : pos + width], "big")
    raise Unsupported(hex(code))


def _compound(raw: bytes, pos: int, kinds: tuple[int, int, int]) -> tuple[int, int]:
    """(element count, first element position) of a list/map constructor."""
    empty, small, large = kinds
    code = raw[pos]
    if code == empty:
        return 0, pos + 1
    if code == small:
        return raw[pos + 2], pos + 3
    if code == large:
        return int.from_bytes(raw[pos + 5 : pos + 9], "big"), pos + 9
    raise Unsupported(hex(code))


def section_list(encoded: bytes) -> list[Any]:
    """The fields of a described list section (``00 53 xx`` + list)."""
    count, pos = _compound(encoded, 3, (0x45, 0xC0, 0xD0))
    values = []
    for _ in range(count):
        value, pos = primitive(encoded, pos)
        values.append(value)
    return values


def section_map(encoded: bytes) -> dict[Any, Any]:
    """The entries of a described map section (``00 53 xx`` + map)."""
    count, pos = _compound(encoded, 3, (-1, 0xC1, 0xD1))
    result = {}
    for _ in range(count // 2):
        key, pos = primitive(encoded, pos)
        value, pos = primitive(encoded, pos)
        result[key] = value
    return result


def _list8_or_32(items: bytes, count: int, small: int, large: int) -> bytes:
    if len(items) + 1 <= 255:
        return bytes((small, len(items) + 1, count)) + items
    return bytes((large,)) + struct.pack(">II", len(items) + 4, count) + items


def encode_header(durable: bool, priority: int, ttl_ms: int | None, delivery_count: int) -> bytes:
    """The header section with every field explicit (proton omits delivery-count 0)."""
    ttl = b"\x40" if ttl_ms is None else b"\x70" + struct.pack(">I", ttl_ms)
    items = (b"\x41" if durable else b"\x42") + bytes((0x50, priority)) + ttl + b"\x42"
    items += b"\x70" + struct.pack(">I", delivery_count)
    return b"\x00\x53\x70" + _list8_or_32(items, 5, 0xC0, 0xD0)


def encode_annotations(
    values: dict[str, Any], timestamps: frozenset[str], ints: frozenset[str]
) -> bytes:
    """A message-annotations section of symbol keys and long/int/timestamp/string values."""
    items = bytearray()
    for key, value in values.items():
        encoded_key = key.encode()
        items += bytes((0xA3, len(encoded_key))) + encoded_key
        if key in timestamps:
            items += b"\x83" + struct.pack(">q", value)
        elif key in ints:
            items += b"\x71" + struct.pack(">i", value)
        elif isinstance(value, int):
            items += b"\x81" + struct.pack(">q", value)
        else:
            text = str(value).encode()
            items += b"\xb1" + struct.pack(">I", len(text)) + text
    return b"\x00\x53\x72" + _list8_or_32(bytes(items), len(values) * 2, 0xC1, 0xD1)
