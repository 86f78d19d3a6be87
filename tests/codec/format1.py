"""Test support: a writer of magic-1 (row) batches, the format ``codec.records``
specifies and still reads. The product writes magic 2 only (``codec.columnar``); tests
that check magic-1 data stays readable (golden bytes, decode, recovery, the write
node's refusal of it) build their batches here."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Protocol

from crc32c import crc32c

from vpq.codec.batch_common import _FRONT, _TAIL, COMPRESSION_MASK, MAGIC, Headers, encode_headers
from vpq.codec.records import PREFIX as _PREFIX
from vpq.codec.varint import SMALL_LIMIT, UVARINT_SMALL, encode_uvarint


class RecordFields(Protocol):
    """What ``build_batch`` reads of a record (a ``Record`` is one)."""

    @property
    def value(self) -> bytes: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def virtual_partition(self) -> int: ...
    @property
    def key_hash(self) -> int: ...
    @property
    def context_id(self) -> int: ...
    @property
    def value_encoding(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def headers(self) -> Headers: ...
    @property
    def timestamp_ms(self) -> int | None: ...


def build_batch(base_offset: int, records: Sequence[RecordFields], timestamp_ms: int, attributes: int = 0) -> bytes:
    """Encode ``records`` as one batch whose first offset is ``base_offset``.

    Records without their own ``timestamp_ms`` get ``timestamp_ms``. Raises
    ``ValueError`` for an empty sequence or a field out of range (ids must fit
    uint32, value_encoding uint8, timestamps int64). Their ``offset`` is ignored."""
    n = len(records)
    if n == 0:
        raise ValueError("a batch needs at least one record")
    if attributes & COMPRESSION_MASK:
        raise ValueError("compression is not supported in magic 1")
    uv = UVARINT_SMALL
    pack = _PREFIX.pack
    first = records[0].timestamp_ms
    first_ts = timestamp_ms if first is None else first
    max_ts = first_ts
    parts: list[bytes] = [b""]
    append = parts.append
    carry = b""  # the previous record's header bytes, glued to the next record's head
    try:
        for r in records:
            ts = r.timestamp_ms
            if ts is None:
                ts = timestamp_ms
            if ts > max_ts:
                max_ts = ts
            d = ts - first_ts
            z = (d << 1) if d >= 0 else ((-d) << 1) - 1
            tsv = uv[z] if z < SMALL_LIMIT else encode_uvarint(z)
            key = r.key
            if key is None:
                kv = b"\x01"
                kl = 0
            else:
                kl = len(key)
                z = kl << 1
                kv = uv[z] if z < SMALL_LIMIT else encode_uvarint(z)
            value = r.value
            vl = len(value)
            vv = uv[vl] if vl < SMALL_LIMIT else encode_uvarint(vl)
            headers = r.headers
            hv = encode_headers(headers) if headers else b"\x00"
            small = pack(r.queue_id, r.virtual_partition, r.key_hash, r.context_id, r.value_encoding) + tsv + kv
            body = len(small) + kl + len(vv) + vl + len(hv)
            lv = uv[body] if body < SMALL_LIMIT else encode_uvarint(body)
            if kl:
                append(carry + lv + small + key + vv)  # type: ignore[operator]
            else:
                append(carry + lv + small + vv)
            append(value)
            carry = hv
        append(carry)
        parts[0] = _TAIL.pack(attributes, n - 1, first_ts, max_ts, n)
        body_bytes = b"".join(parts)
        return _FRONT.pack(base_offset, len(body_bytes) + 5, MAGIC, crc32c(body_bytes)) + body_bytes
    except struct.error as exc:
        raise ValueError(f"record field out of range: {exc}") from exc
