"""The columnar record-batch format, version (magic) 2. Pure: no I/O, no clock.

Magic 1 (``codec.records``) stores each record as a row of varints, so every
check of a batch (the write node's placement check, its traffic counts) walks the
records one by one in Python. Magic 2 stores the same fields as fixed-width columns
followed by three data areas, so a batch is built, checked and summarised with a
handful of C-level operations per column (``array``, ``sum``, ``zip``) whatever the
record count. Same header, same CRC rule, same ``Record`` on decode: readers accept both
magics and writers choose; the produce path writes magic 2.

Batch header: the 43 bytes of magic 1 (big-endian, ``batch_common.HEADER``) with magic = 2.

Record area, ``n`` = record_count; every column integer is LITTLE-endian::

    queue_id           n x uint32
    virtual_partition  n x uint32
    key_hash           n x uint32
    context_id         n x uint32
    timestamp_delta    n x int64    record timestamp - first_timestamp
    key_length         n x int32    -1 = null key
    value_length       n x uint32
    headers_length     n x uint32   bytes of the record's encoded headers; 0 = no headers
    value_encoding     n x uint8    0 = JSON bytes (UTF-8), 1 = raw bytes
    keys               the non-null keys, concatenated in record order
    values             the values, concatenated in record order
    headers            the non-empty header blocks, concatenated in record order: each is
                       uvarint count (>= 1), then count x (uvarint key length, UTF-8 key,
                       uvarint value length, value bytes), exactly as in magic 1

The record area is exactly ``37 n`` bytes of columns plus the three data areas (a batch
whose lengths do not add up is corrupt). ``max_timestamp`` is ``first_timestamp`` plus
the largest delta.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence
from itertools import repeat
from operator import eq
from typing import Any, NamedTuple, Protocol

from crc32c import crc32c

from vpq.codec.batch_common import (
    _FRONT,
    _TAIL,
    COMPRESSION_MASK,
    HEADER_SIZE,
    VALUE_RAW,
    Headers,
    Record,
    decode_headers,
    encode_headers,
)
from vpq.codec.errors import CorruptBatchError
from vpq.codec.system_headers import DEDUP
from vpq.codec.varint import decode_uvarint

MAGIC_COLUMNAR = 2
FIXED_RECORD_BYTES = 4 * 4 + 8 + 4 * 3 + 1  # 37: the column bytes of one record
MAX_VALUE_ENCODING = VALUE_RAW

_BIG_ENDIAN_HOST = sys.byteorder == "big"
for _code, _size in (("I", 4), ("i", 4), ("q", 8)):
    if array(_code).itemsize != _size:  # pragma: no cover - every mainstream platform
        raise ImportError(f"array typecode {_code!r} is not {_size} bytes on this platform")

TrafficKey = tuple[int, int, int]
"""(queue id, vp, context id)"""


class BatchFields(Protocol):
    """What this module reads of a parsed batch header (``codec.records.BatchView``)."""

    buf: Any
    pos: int
    base_offset: int
    first_ts: int
    record_count: int

    @property
    def size(self) -> int: ...


class ColumnarRecords(NamedTuple):
    """The records of one batch as columns (all of length n, n >= 1).

    ``keys`` hold bytes or None; ``values`` bytes; ``encodings`` one byte per record
    (``bytes``) or a sequence of ints; ``headers`` the encoded header block of each record
    (``batch_common.encode_headers``, ``b""`` for none), or None when no record has headers;
    ``ts_deltas`` each record's timestamp minus the batch's, or None when all are equal."""

    queue_ids: Sequence[int]
    vps: Sequence[int]
    key_hashes: Sequence[int]
    context_ids: Sequence[int]
    keys: Sequence[bytes | None]
    values: Sequence[bytes]
    encodings: bytes | Sequence[int]
    headers: Sequence[bytes] | None = None
    ts_deltas: Sequence[int] | None = None


def _column(code: str, values: Sequence[int], name: str) -> bytes:
    try:
        col = array(code, values)
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"{name} out of range: {exc}") from None
    if _BIG_ENDIAN_HOST:  # pragma: no cover
        col.byteswap()
    return col.tobytes()


def _read_column(code: str, buf: memoryview) -> array:
    col = array(code)
    col.frombytes(buf)
    if _BIG_ENDIAN_HOST:  # pragma: no cover
        col.byteswap()
    return col


def build_columnar_batch(base_offset: int, timestamp_ms: int, cols: ColumnarRecords, attributes: int = 0) -> bytes:
    """Encode ``cols`` as one magic-2 batch whose first offset is ``base_offset``; record i's
    timestamp is ``timestamp_ms + ts_deltas[i]`` (the header's first timestamp is record
    0's, as in magic 1). ``ValueError`` for an empty batch, columns of different lengths or
    a field out of range."""
    return bytes(build_columnar_buffer(base_offset, timestamp_ms, cols, attributes))


def build_columnar_buffer(base_offset: int, timestamp_ms: int, cols: ColumnarRecords, attributes: int = 0) -> bytearray:
    """The bytes of :func:`build_columnar_batch` in a ``bytearray``, written in one pass:
    the columns and every key, value and header block are copied once, straight into it
    (the produce path sends it as is)."""
    n = len(cols.values)
    if n == 0:
        raise ValueError("a batch needs at least one record")
    if attributes & COMPRESSION_MASK:
        raise ValueError("compression is not supported in magic 2")
    keys = cols.keys
    if not (len(cols.queue_ids) == len(cols.vps) == len(cols.key_hashes) == len(cols.context_ids) == len(keys) == n):
        raise ValueError("every column needs one entry per record")
    if len(cols.encodings) != n:
        raise ValueError("every column needs one entry per record")
    null_keys = None in keys
    if null_keys:
        key_lengths = [-1 if k is None else len(k) for k in keys]
    else:
        key_lengths = list(map(len, keys))  # type: ignore[arg-type]
    values = cols.values
    headers = cols.headers
    if headers is None:
        header_col = bytes(4 * n)
    else:
        if len(headers) != n:
            raise ValueError("every column needs one entry per record")
        header_col = _column("I", list(map(len, headers)), "headers length")
    deltas = cols.ts_deltas
    if deltas is None:
        ts_col = bytes(8 * n)
        max_ts = timestamp_ms
    else:
        if len(deltas) != n:
            raise ValueError("every column needs one entry per record")
        if deltas[0]:  # as in magic 1, the batch's first timestamp is its first record's
            timestamp_ms += deltas[0]
            deltas = [d - deltas[0] for d in deltas]
        ts_col = _column("q", deltas, "timestamp delta")
        max_ts = timestamp_ms + max(deltas)
    encodings = cols.encodings if isinstance(cols.encodings, bytes) else _encodings(cols.encodings)
    pieces: list[Any] = [
        _FRONT_PLACEHOLDER,
        b"",  # the tail of the header, set below
        _column("I", cols.queue_ids, "queue id"),
        _column("I", cols.vps, "virtual partition"),
        _column("I", cols.key_hashes, "key hash"),
        _column("I", cols.context_ids, "context id"),
        ts_col,
        _column("i", key_lengths, "key length"),
        _column("I", list(map(len, values)), "value length"),
        header_col,
        encodings,
    ]
    try:
        pieces[1] = _TAIL.pack(attributes, n - 1, timestamp_ms, max_ts, n)
    except struct.error as exc:
        raise ValueError(f"batch field out of range: {exc}") from exc
    pieces += [k for k in keys if k is not None] if null_keys else keys
    pieces += values
    if headers is not None:
        pieces += headers
    out = bytearray().join(pieces)
    with memoryview(out) as view, view[_FRONT.size :] as body:
        crc = crc32c(body)
    try:
        _FRONT.pack_into(out, 0, base_offset, len(out) - _FRONT.size + 5, MAGIC_COLUMNAR, crc)
    except struct.error as exc:
        raise ValueError(f"batch field out of range: {exc}") from exc
    return out


_FRONT_PLACEHOLDER = bytes(_FRONT.size)  # base_offset, batch_length, magic and CRC, set last


def _encodings(values: Sequence[int]) -> bytes:
    try:
        return bytes(values)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"value encoding out of range: {exc}") from None


def columns_of(records: Sequence[Record], timestamp_ms: int) -> ColumnarRecords:
    """``records`` as columns (timestamps relative to ``timestamp_ms``; a record without
    its own timestamp gets it). For callers holding ``Record`` objects (tests, tools)."""
    deltas = [0 if r.timestamp_ms is None else r.timestamp_ms - timestamp_ms for r in records]
    has_headers = any(r.headers for r in records)
    return ColumnarRecords(
        queue_ids=[r.queue_id for r in records],
        vps=[r.virtual_partition for r in records],
        key_hashes=[r.key_hash for r in records],
        context_ids=[r.context_id for r in records],
        keys=[r.key for r in records],
        values=[r.value for r in records],
        encodings=[r.value_encoding for r in records],
        headers=[encode_headers(r.headers) if r.headers else b"" for r in records] if has_headers else None,
        ts_deltas=deltas if any(deltas) else None,
    )


class _Columns(NamedTuple):
    """The checked columns of one magic-2 batch (``scan``)."""

    queue_ids: array
    vps: array
    key_hashes: array
    context_ids: array
    ts_deltas: array
    key_lengths: array
    value_lengths: array
    header_lengths: array
    encodings: memoryview
    keys_at: int  # buffer position of the keys area
    values_at: int
    headers_at: int


def scan(view: BatchFields, check_headers: bool = True) -> _Columns:
    """Read and check the columns of the magic-2 batch ``view`` (the CRC is not checked
    here: ``view.verify_crc()``): lengths that add up exactly to the record area, key
    lengths >= -1, known value encodings, header blocks that decode exactly (unless
    ``check_headers`` is False: for :func:`decode`, which decodes and so checks them)."""
    n = view.record_count
    start = view.pos + HEADER_SIZE
    end = view.pos + view.size
    fixed = FIXED_RECORD_BYTES * n
    if start + fixed > end:
        raise CorruptBatchError(f"batch at {view.pos}: {n} records need {fixed} column bytes, {end - start} left")
    mv = memoryview(view.buf)
    p = start
    q4, q8 = 4 * n, 8 * n
    qids = _read_column("I", mv[p : p + q4])
    vps = _read_column("I", mv[p + q4 : p + 2 * q4])
    hashes = _read_column("I", mv[p + 2 * q4 : p + 3 * q4])
    ctxs = _read_column("I", mv[p + 3 * q4 : p + 4 * q4])
    p += 4 * q4
    deltas = _read_column("q", mv[p : p + q8])
    p += q8
    kls = _read_column("i", mv[p : p + q4])
    vls = _read_column("I", mv[p + q4 : p + 2 * q4])
    hls = _read_column("I", mv[p + 2 * q4 : p + 3 * q4])
    p += 3 * q4
    encodings = mv[p : p + n]
    p += n
    if min(kls) < -1:
        raise CorruptBatchError(f"batch at {view.pos}: negative key length")
    if max(encodings) > MAX_VALUE_ENCODING:
        raise CorruptBatchError(f"batch at {view.pos}: unknown value encoding {max(encodings)}")
    key_bytes = sum(kls) + kls.count(-1)
    value_bytes = sum(vls)
    header_bytes = sum(hls)
    if p + key_bytes + value_bytes + header_bytes != end:
        raise CorruptBatchError(
            f"batch at {view.pos}: record area of {end - start} bytes, its columns describe "
            f"{fixed + key_bytes + value_bytes + header_bytes}"
        )
    cols = _Columns(qids, vps, hashes, ctxs, deltas, kls, vls, hls, encodings, p, p + key_bytes, p + key_bytes + value_bytes)
    if header_bytes and check_headers:
        _check_headers(view.buf, cols)
    return cols


def _check_headers(buf: Any, cols: _Columns) -> None:
    pos = cols.headers_at
    for i, hl in enumerate(cols.header_lengths):
        if hl:
            if not _plain_block(buf, pos, pos + hl):
                decode_header_block(buf, pos, pos + hl, i)  # the full decoder judges (and says why)
            pos += hl


def _plain_block(buf: Any, p: int, end: int) -> bool:
    """True when ``buf[p:end]`` is a valid header block whose varints are all one byte
    (the usual case), checked without building the headers; False when it is not, or
    not that simple: :func:`decode_header_block` then decides."""
    count = buf[p]
    if count == 0 or count >= 0x80:
        return False
    p += 1
    for _ in range(count):
        if p >= end:
            return False
        kl = buf[p]
        ke = p + 1 + kl
        if kl >= 0x80 or ke >= end:
            return False
        try:
            str(buf[p + 1 : ke], "utf-8")
        except UnicodeDecodeError:
            return False
        vl = buf[ke]
        p = ke + 1 + vl
        if vl >= 0x80 or p > end:
            return False
    return p == end


def _plain_headers(buf: Any, p: int, end: int) -> Headers | None:
    """The headers of the block ``buf[p:end]`` when it is one :func:`_plain_block`
    accepts (all varints one byte: the usual case), read without the general decoder;
    None (or UnicodeDecodeError) when it is not: :func:`decode_header_block` decides."""
    count = buf[p]
    if count == 1 and p + 1 < end:  # one header (a dedup id, usually): no list to build
        kl = buf[p + 1]
        ke = p + 2 + kl
        if kl >= 0x80 or ke >= end:
            return None
        vl = buf[ke]
        if vl >= 0x80 or ke + 1 + vl != end:
            return None
        return ((str(buf[p + 2 : ke], "utf-8"), bytes(buf[ke + 1 : end])),)
    if count == 0 or count >= 0x80:
        return None
    p += 1
    items: list[tuple[str, bytes]] = []
    for _ in range(count):
        if p >= end:
            return None
        kl = buf[p]
        ke = p + 1 + kl
        if kl >= 0x80 or ke >= end:
            return None
        vl = buf[ke]
        if vl >= 0x80:
            return None
        name = str(buf[p + 1 : ke], "utf-8")
        p = ke + 1 + vl
        items.append((name, bytes(buf[ke + 1 : p])))
    return tuple(items) if p == end else None


def read_header_block(buf: Any, p: int, end: int, index: int = 0) -> Headers:
    """The headers of the block ``buf[p:end]`` of record ``index``: read by
    :func:`_plain_headers` when it can, else by :func:`decode_header_block` (which
    raises ``CorruptBatchError`` for a block that does not decode exactly)."""
    try:
        headers = _plain_headers(buf, p, end)
    except UnicodeDecodeError:
        headers = None
    return headers if headers is not None else decode_header_block(buf, p, end, index)


def read_headers(buf: Any, p: int, size: int, index: int, drop_dedup: bool) -> Headers:
    """The headers of record ``index``'s block of ``size`` bytes (>= 1) at ``p``, as
    :func:`decode` gives them: with ``drop_dedup``, none when the block holds only the
    dedup id (checked, not read, when the id is below 128 bytes)."""
    if drop_dedup and is_lone_dedup(buf, p, size):
        return ()
    headers = read_header_block(buf, p, p + size, index)
    if drop_dedup and len(headers) == 1 and headers[0][0] == DEDUP:  # an id of 128 bytes or more
        return ()
    return headers


def is_lone_dedup(buf: Any, p: int, size: int) -> bool:
    """True when the header block of ``size`` bytes at ``p`` holds exactly one header,
    the dedup id (``system_headers.DEDUP``), with one-byte varints (ids below 128
    bytes): a valid block, checked without reading it. False says nothing: read the
    block (:func:`read_header_block`)."""
    return (
        _LONE_DEDUP_SIZE < size <= _LONE_DEDUP_SIZE + 0x80
        and buf[p : p + _LONE_DEDUP_SIZE] == LONE_DEDUP
        and buf[p + _LONE_DEDUP_SIZE] == size - _LONE_DEDUP_SIZE - 1
    )


def all_lone_dedup(buf: bytes, starts: Sequence[int], sizes: Sequence[int]) -> bool:
    """:func:`is_lone_dedup` of every block (``starts[i]``, ``sizes[i]``), checked a
    column at a time (the usual batch: every record carries a dedup id alone); ``buf``
    must be ``bytes``. False says nothing about any one block."""
    if not sizes or min(sizes) <= _LONE_DEDUP_SIZE or max(sizes) > _LONE_DEDUP_SIZE + 0x80:
        return False
    if not all(map(buf.startswith, repeat(LONE_DEDUP, len(starts)), starts)):
        return False
    id_lengths = map(buf.__getitem__, map(_LONE_DEDUP_SIZE.__add__, starts))
    return all(map(eq, id_lengths, map((-_LONE_DEDUP_SIZE - 1).__add__, sizes)))


def decode_header_block(buf: object, pos: int, end: int, index: int = 0) -> Headers:
    """The headers of the block ``buf[pos:end]`` of record ``index`` (``CorruptBatchError``
    unless it holds at least one header and ends exactly at ``end``)."""
    try:
        count, p = decode_uvarint(buf, pos, end)  # type: ignore[arg-type]
        if count < 1:
            raise CorruptBatchError(f"record {index}: a header block must hold at least one header")
        headers, p = decode_headers(buf, p, end, count)  # type: ignore[arg-type]
    except (struct.error, UnicodeDecodeError, IndexError, ValueError) as exc:
        if isinstance(exc, CorruptBatchError):
            raise
        raise CorruptBatchError(f"record {index}: undecodable headers: {exc}") from exc
    if p != end:
        raise CorruptBatchError(f"record {index}: header block does not end where its length says")
    return headers


def summarize(view: BatchFields) -> dict[TrafficKey, list[int]]:
    """(queue id, vp, context id) -> [records, value bytes] of a magic-2 batch, in
    first-seen order, after the checks of :func:`scan` (``CorruptBatchError``)."""
    cols = scan(view)
    routes = list(zip(cols.queue_ids, cols.vps, cols.context_ids))
    first = routes[0]
    if routes.count(first) == len(routes):
        return {first: [len(routes), sum(cols.value_lengths)]}
    out: dict[TrafficKey, list[int]] = {}
    for key, vl in zip(routes, cols.value_lengths):
        c = out.get(key)
        if c is None:
            out[key] = [1, vl]
        else:
            c[0] += 1
            c[1] += vl
    return out


# slot setters of Record (as in records.BatchView.records: about 2x faster than __init__)
_SET = {name: getattr(Record, name).__set__ for name in Record.__slots__}  # type: ignore[attr-defined]


LONE_DEDUP = bytes((1, len(DEDUP))) + DEDUP.encode("ascii")
"""The start of a header block that holds one header, the dedup id (one-byte varints)."""
_LONE_DEDUP_SIZE = len(LONE_DEDUP)


def decode(view: BatchFields, drop_dedup: bool = False) -> list[Record]:
    """Every record of a magic-2 batch (offsets and timestamps filled in), after the checks
    of :func:`scan` (``CorruptBatchError``). ``drop_dedup``: a record whose only header is
    its dedup id (``system_headers.DEDUP``) gets no headers, for readers that never use the
    id (the block is still checked)."""
    cols = scan(view, check_headers=False)  # each block is checked as it is decoded below
    buf = view.buf
    first_ts = view.first_ts
    offset = view.base_offset
    kp, vp_, hp = cols.keys_at, cols.values_at, cols.headers_at
    set_value, set_qid, set_vp = _SET["value"], _SET["queue_id"], _SET["virtual_partition"]
    set_hash, set_ctx, set_enc = _SET["key_hash"], _SET["context_id"], _SET["value_encoding"]
    set_key, set_headers, set_ts, set_offset = _SET["key"], _SET["headers"], _SET["timestamp_ms"], _SET["offset"]
    new = object.__new__
    out: list[Record] = []
    append = out.append
    for i, (qid, vpart, kh, ctx, tsd, kl, vl, hl, enc) in enumerate(
        zip(
            cols.queue_ids, cols.vps, cols.key_hashes, cols.context_ids, cols.ts_deltas,
            cols.key_lengths, cols.value_lengths, cols.header_lengths, cols.encodings,
        )  # fmt: skip
    ):
        if kl < 0:
            key = None
        else:
            key = bytes(buf[kp : kp + kl])  # type: ignore[index]
            kp += kl
        value = bytes(buf[vp_ : vp_ + vl])  # type: ignore[index]
        vp_ += vl
        if hl:
            headers = read_headers(buf, hp, hl, i, drop_dedup)
            hp += hl
        else:
            headers = ()
        r = new(Record)
        set_value(r, value)
        set_qid(r, qid)
        set_vp(r, vpart)
        set_hash(r, kh)
        set_ctx(r, ctx)
        set_enc(r, enc)
        set_key(r, key)
        set_headers(r, headers)
        set_ts(r, first_ts + tsd)
        set_offset(r, offset + i)
        append(r)
    return out
