"""Splitting an encoded AMQP message into its sections without decoding the body.

Sections are described types whose values carry their own length, so boundaries are
found by reading constructors and sizes only; proton decodes a section only when a
caller needs its value (and handles any encoding the fast path does not recognise).
"""

from __future__ import annotations

import struct
from typing import Any

from proton import Data, Described

from .fastdecode import Unsupported, section_list, section_map

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS = 0x70, 0x71, 0x72
PROPERTIES, APPLICATION_PROPERTIES, DATA, FOOTER = 0x73, 0x74, 0x75, 0x78


class MessageFormatError(ValueError):
    """The bytes are not an AMQP 1.0 message."""


def plain(value: Any) -> Any:
    """Copy proton values out of C memory into plain Python values."""
    if isinstance(value, memoryview):
        return bytes(value)
    if isinstance(value, Described):
        return Described(plain(value.descriptor), plain(value.value))
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


_FIXED_WIDTH = {
    0x40: 0,
    0x41: 0,
    0x42: 0,
    0x43: 0,
    0x44: 0,
    0x45: 0,
    0x50: 1,
    0x51: 1,
    0x52: 1,
    0x53: 1,
}
_SIZE1 = {0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0}
_SIZE4 = {0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0}


def _section_bounds(raw: bytes) -> list[tuple[int, int, int]] | None:
    """(descriptor, start, end) of each section by reading only constructors and sizes.

    Sections are described types whose values carry their own length, so the split
    needs no decoding. Returns None for encodings it does not recognise (the caller then
    falls back to a full proton decode).
    """
    bounds: list[tuple[int, int, int]] = []
    offset, total = 0, len(raw)
    while offset < total:
        if raw[offset] != 0x00 or offset + 3 > total:
            return None
        if raw[offset + 1] == 0x53:
            code, cursor = raw[offset + 2], offset + 3
        elif raw[offset + 1] == 0x80 and offset + 10 <= total:
            code, cursor = int.from_bytes(raw[offset + 2 : offset + 10], "big"), offset + 10
        else:
            return None
        if cursor >= total:
            return None
        constructor = raw[cursor]
        if constructor in _SIZE1 and cursor + 1 < total:
            end = cursor + 2 + raw[cursor + 1]
        elif constructor in _SIZE4 and cursor + 4 < total:
            end = cursor + 5 + int.from_bytes(raw[cursor + 1 : cursor + 5], "big")
        elif constructor in _FIXED_WIDTH:
            end = cursor + 1 + _FIXED_WIDTH[constructor]
        else:
            return None
        if end > total:
            return None
        bounds.append((code, offset, end))
        offset = end
    return bounds


def _decode_section(encoded: bytes) -> Any:
    data = Data()
    data.decode(encoded)
    section = data.get_object()
    return plain(section.value) if isinstance(section, Described) else None


def split_sections(raw: bytes) -> list[tuple[int, Any, bytes]]:
    """(descriptor code, decoded value, encoded bytes) of each top-level section."""
    bounds = _section_bounds(raw)
    if bounds is not None:
        return [(code, Lazy, raw[start:end]) for code, start, end in bounds]
    return _split_with_proton(raw)


class Lazy:
    """Marker: the section value is decoded only when the caller needs it."""


def fast_section(code: int, encoded: bytes) -> Any:
    try:
        return section_map(encoded) if code == APPLICATION_PROPERTIES else section_list(encoded)
    except (Unsupported, IndexError, UnicodeDecodeError, struct.error):
        return _decode_section(encoded)


def section_value(value: Any, encoded: bytes) -> Any:
    return _decode_section(encoded) if value is Lazy else value


def _split_with_proton(raw: bytes) -> list[tuple[int, Any, bytes]]:
    sections: list[tuple[int, Any, bytes]] = []
    offset = 0
    view = memoryview(raw)
    while offset < len(raw):
        data = Data()
        try:
            consumed = data.decode(bytes(view[offset:]))
            section = data.get_object()
        except Exception as error:
            raise MessageFormatError(f"undecodable section at byte {offset}") from error
        if not isinstance(section, Described) or consumed <= 0:
            raise MessageFormatError(f"section at byte {offset} is not a described type")
        descriptor: Any = section.descriptor
        sections.append((int(descriptor), plain(section.value), raw[offset : offset + consumed]))
        offset += consumed
    return sections
