"""Unsigned LEB128 varints and zigzag signed varints (pure, no I/O).

Encoding: 7 bits per byte, least significant group first, high bit set on every
byte but the last (the protobuf / Kafka layout). Signed values are zigzag mapped
first (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...). Values are limited to 64 bits.

The hot path (record encoding) uses :data:`UVARINT_SMALL`, a table of the
pre-encoded values below 2**14, to avoid a Python loop per field.
"""

from __future__ import annotations

from vpq.codec.errors import CorruptBatchError

MAX_VARINT_BYTES = 10
_U64 = (1 << 64) - 1
SMALL_LIMIT = 1 << 14

BytesLike = bytes | bytearray | memoryview


def _encode_uvarint_loop(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


UVARINT_SMALL: tuple[bytes, ...] = tuple(_encode_uvarint_loop(i) for i in range(SMALL_LIMIT))


def encode_uvarint(value: int) -> bytes:
    """Encode ``0 <= value < 2**64``; ``ValueError`` otherwise."""
    if 0 <= value < SMALL_LIMIT:
        return UVARINT_SMALL[value]
    if value < 0 or value > _U64:
        raise ValueError(f"uvarint out of range: {value}")
    return _encode_uvarint_loop(value)


def zigzag(value: int) -> int:
    """Map a signed 64-bit int to an unsigned one (small magnitudes stay small)."""
    if value < -(1 << 63) or value >= (1 << 63):
        raise ValueError(f"signed varint out of range: {value}")
    return (value << 1) if value >= 0 else ((-value) << 1) - 1


def unzigzag(value: int) -> int:
    return (value >> 1) if not value & 1 else -((value + 1) >> 1)


def encode_svarint(value: int) -> bytes:
    """Zigzag then varint-encode a signed 64-bit int."""
    return encode_uvarint(zigzag(value))


def decode_uvarint(buf: BytesLike, pos: int, end: int) -> tuple[int, int]:
    """Decode the varint at ``buf[pos:]`` not reading at or past ``end``.
    Returns (value, next position). ``CorruptBatchError`` on truncation or > 10 bytes."""
    if pos >= end:
        raise CorruptBatchError("truncated varint")
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    p = pos + 1
    while True:
        if p >= end or p - pos >= MAX_VARINT_BYTES:
            raise CorruptBatchError("truncated or overlong varint")
        b = buf[p]
        result |= (b & 0x7F) << shift
        p += 1
        if b < 0x80:
            if result > _U64:
                raise CorruptBatchError("varint exceeds 64 bits")
            return result, p
        shift += 7


def decode_svarint(buf: BytesLike, pos: int, end: int) -> tuple[int, int]:
    """Decode a zigzag varint; returns (signed value, next position)."""
    raw, p = decode_uvarint(buf, pos, end)
    return unzigzag(raw), p
