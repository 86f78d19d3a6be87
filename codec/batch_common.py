"""What both record-batch magics share: the batch header layout, the ``Record`` a batch
decodes to, value encodings and the header-block encoding of a record's headers. Pure:
no I/O, no clock.

The layouts are specified in ``codec.records`` (header, magic 1) and ``codec.columnar``
(magic 2), which both build on this module.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from vpq.codec.errors import CorruptBatchError
from vpq.codec.varint import BytesLike, decode_uvarint, encode_uvarint

MAGIC = 1
MAGIC_COLUMNAR = 2  # codec.columnar
MAGICS = (MAGIC, MAGIC_COLUMNAR)
VALUE_JSON = 0
VALUE_RAW = 1
COMPRESSION_MASK = 0x07

_FRONT = struct.Struct(">qibI")  # base_offset, batch_length, magic, crc
_TAIL = struct.Struct(">hiqqi")  # attributes, last_offset_delta, first_ts, max_ts, record_count
HEADER = struct.Struct(">qibIhiqqi")
HEADER_SIZE = HEADER.size  # 43
LENGTH_END = 12  # base_offset + batch_length: the part of a batch not counted by batch_length
CRC_START = 17

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One message as stored in a physical partition.

    ``timestamp_ms`` is optional when building (the batch timestamp is used);
    ``offset`` is -1 until read back from a log."""

    value: bytes
    queue_id: int = 0
    virtual_partition: int = 0
    key_hash: int = 0
    context_id: int = 0
    value_encoding: int = VALUE_RAW
    key: bytes | None = None
    headers: Headers = ()
    timestamp_ms: int | None = None
    offset: int = -1


def encode_headers(headers: Headers) -> bytes:
    """A record's headers as stored: uvarint count, then (key length, key, value length, value)."""
    out = [encode_uvarint(len(headers))]
    for name, value in headers:
        raw = name.encode("utf-8")
        out.append(encode_uvarint(len(raw)))
        out.append(raw)
        out.append(encode_uvarint(len(value)))
        out.append(bytes(value))
    return b"".join(out)


def decode_headers(buf: BytesLike, p: int, end: int, count: int) -> tuple[Headers, int]:
    items: list[tuple[str, bytes]] = []
    for _ in range(count):
        kl, p = decode_uvarint(buf, p, end)
        if p + kl > end:
            raise CorruptBatchError("header key out of bounds")
        name = bytes(buf[p : p + kl]).decode("utf-8")
        p += kl
        vl, p = decode_uvarint(buf, p, end)
        if p + vl > end:
            raise CorruptBatchError("header value out of bounds")
        items.append((name, bytes(buf[p : p + vl])))
        p += vl
    return tuple(items), p
