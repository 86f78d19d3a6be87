"""The record-batch format: the header of every batch, and the reader of the row
format, version (magic) 1. Pure: no I/O, no clock.

A physical partition stores a sequence of *batches*; a batch holds one or more
records with consecutive offsets. All integers of this module are big-endian. The
columnar record area of magic 2 (the only one the platform writes) is in
``codec.columnar``; the header below, the CRC rule and ``BatchView`` serve both,
and ``BatchView.records()`` decodes either. Nothing in the product writes magic 1
any more; it stays readable so that batches already in a log can still be read.

Batch header (43 bytes)::

    off size field
      0    8 base_offset        int64   offset of the first record (assigned by the log)
      8    4 batch_length       int32   bytes after this field (so a batch is 12 + batch_length bytes)
     12    1 magic              int8    = 1 (rows, below) or 2 (columns, codec.columnar)
     13    4 crc                uint32  CRC32C (Castagnoli) of every byte from offset 17 to the end
     17    2 attributes         int16   bits 0-2 compression (only 0 = none exists); other bits zero
     19    4 last_offset_delta  int32   = record_count - 1 (records have consecutive offsets)
     23    8 first_timestamp    int64   ms since the epoch, timestamp of the first record
     31    8 max_timestamp      int64   largest record timestamp in the batch
     39    4 record_count       int32   >= 1

The CRC does not cover ``base_offset`` nor ``batch_length``: the log stamps the
base offset when it appends (:func:`restamp_base_offset`) without recomputing the
CRC, as Kafka does. A wrong length still fails the CRC because it moves the range.

Magic-1 record (repeated ``record_count`` times)::

    length             uvarint  bytes of the rest of this record
    queue_id           uint32   interned queue id
    virtual_partition  uint32
    key_hash           uint32   mmh3_32 of the key; keyless: the spreading hash the router chose (KeylessSpreader)
    context_id         uint32   interned isolation-context (env, set, lane) id
    value_encoding     uint8    0 = JSON bytes (UTF-8), 1 = raw bytes
    timestamp_delta    svarint  record timestamp - first_timestamp (zigzag)
    key_length         svarint  -1 = null key
    key                bytes
    value_length       uvarint
    value              bytes
    header_count       uvarint
    headers            header_count x (uvarint key length, UTF-8 key, uvarint value length, value bytes)

A record's offset is ``base_offset + index`` within its batch. Header keys are
``str`` and header values are ``bytes`` (callers encode text values themselves).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from crc32c import crc32c

from vpq.codec import columnar as _columnar
from vpq.codec.batch_common import (
    COMPRESSION_MASK,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LENGTH_END,
    MAGIC,
    MAGIC_COLUMNAR,
    Headers,
    Record,
    decode_headers,
)
from vpq.codec.errors import CorruptBatchError
from vpq.codec.system_headers import DEDUP
from vpq.codec.varint import (
    BytesLike,
    decode_svarint,
    decode_uvarint,
)

_BASE = struct.Struct(">q")
_PREFIX = struct.Struct(">IIIIB")
PREFIX_SIZE = _PREFIX.size  # 17
PREFIX = _PREFIX  # queue id, vp, key hash, context id, value encoding
# smallest record: length varint + prefix + ts delta + key length + value length + header count
MIN_RECORD_SIZE = 1 + PREFIX_SIZE + 4
MIN_BATCH_LENGTH = HEADER_SIZE - LENGTH_END + MIN_RECORD_SIZE
# magic 2 (columnar): the column bytes of one record (codec.columnar.FIXED_RECORD_BYTES)
MIN_RECORD_SIZE_BY_MAGIC = {MAGIC: MIN_RECORD_SIZE, MAGIC_COLUMNAR: 37}

# slot setters: build decoded records without the frozen dataclass __init__ (about 2x faster)
_SET_VALUE = Record.value.__set__  # type: ignore[attr-defined]
_SET_QUEUE = Record.queue_id.__set__  # type: ignore[attr-defined]
_SET_VP = Record.virtual_partition.__set__  # type: ignore[attr-defined]
_SET_KEY_HASH = Record.key_hash.__set__  # type: ignore[attr-defined]
_SET_CONTEXT = Record.context_id.__set__  # type: ignore[attr-defined]
_SET_ENCODING = Record.value_encoding.__set__  # type: ignore[attr-defined]
_SET_KEY = Record.key.__set__  # type: ignore[attr-defined]
_SET_HEADERS = Record.headers.__set__  # type: ignore[attr-defined]
_SET_TIMESTAMP = Record.timestamp_ms.__set__  # type: ignore[attr-defined]
_SET_OFFSET = Record.offset.__set__  # type: ignore[attr-defined]


def restamp_base_offset(batch: BytesLike, base_offset: int) -> bytes:
    """A copy of ``batch`` (one whole batch) with its base offset replaced; the CRC stays valid."""
    return _BASE.pack(base_offset) + bytes(batch[8:])


def restamp_base_offset_into(buf: bytearray, pos: int, base_offset: int) -> None:
    """Overwrite in place the base offset of the batch starting at ``buf[pos]``."""
    _BASE.pack_into(buf, pos, base_offset)


def header_problem(base_offset: int, length: int, magic: int, attributes: int, last_delta: int, count: int) -> str | None:
    """Why these header fields cannot belong to a valid batch, or ``None``. Pure sanity
    checks that need no payload: used by readers and by recovery before the CRC."""
    min_record = MIN_RECORD_SIZE_BY_MAGIC.get(magic)
    if min_record is None:
        return f"unknown magic {magic}"
    if length < HEADER_SIZE - LENGTH_END + min_record:
        return f"batch length {length} too small"
    if count < 1 or last_delta != count - 1:
        return f"record count {count} / last offset delta {last_delta} mismatch"
    if count * min_record > length:
        return f"record count {count} cannot fit in {length} bytes"
    if attributes & COMPRESSION_MASK:
        return f"unsupported attributes {attributes:#x}"
    if base_offset < 0:
        return f"negative base offset {base_offset}"
    return None


class BatchView:
    """A read-only view of one batch inside a buffer (no copy until asked)."""

    __slots__ = (
        "buf",
        "pos",
        "base_offset",
        "length",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "first_ts",
        "max_ts",
        "record_count",
    )

    def __init__(self, buf: BytesLike, pos: int = 0) -> None:
        """Parse the header at ``buf[pos]``. ``CorruptBatchError`` if the header is
        malformed or the batch extends past the end of ``buf`` (the CRC is not checked)."""
        if len(buf) - pos < HEADER_SIZE:
            raise CorruptBatchError(f"truncated batch header at {pos}")
        (
            self.base_offset,
            self.length,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.first_ts,
            self.max_ts,
            self.record_count,
        ) = HEADER.unpack_from(buf, pos)
        problem = header_problem(
            self.base_offset, self.length, self.magic, self.attributes, self.last_offset_delta, self.record_count
        )
        if problem is not None:
            raise CorruptBatchError(f"batch at {pos}: {problem}")
        if pos + LENGTH_END + self.length > len(buf):
            raise CorruptBatchError(f"truncated batch at {pos}")
        self.buf = buf
        self.pos = pos

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return LENGTH_END + self.length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count

    def raw(self) -> bytes:
        """The batch's bytes (a copy)."""
        return bytes(self.buf[self.pos : self.pos + self.size])

    def verify_crc(self) -> bool:
        start = self.pos + CRC_START
        end = self.pos + self.size
        return crc32c(memoryview(self.buf)[start:end]) == self.crc

    def records(self, drop_dedup: bool = False) -> list[Record]:
        """Decode every record (offsets and timestamps filled in). ``CorruptBatchError``
        when the record area does not parse exactly; the CRC is not checked here.
        ``drop_dedup``: a record whose only header is its dedup id gets no headers (for
        readers that never use the id).

        Hot path for readers: one-byte varints are decoded inline and records are
        built through their slots. Bounds are enforced by the exact-end check of
        each record (the read position only grows) and by the caught errors. A magic-2
        batch is decoded by ``codec.columnar.decode``."""
        if self.magic == MAGIC_COLUMNAR:
            return _columnar.decode(self, drop_dedup)
        buf = self.buf
        end = self.pos + self.size
        p = self.pos + HEADER_SIZE
        offset = self.base_offset
        first_ts = self.first_ts
        unpack = _PREFIX.unpack_from
        new = object.__new__
        out: list[Record] = []
        append = out.append
        try:
            for _ in range(self.record_count):
                b = buf[p]
                if b < 0x80:
                    rend = p + 1 + b
                    p += 1
                else:
                    ln, p = decode_uvarint(buf, p, end)
                    rend = p + ln
                if rend > end:
                    raise CorruptBatchError(f"record at offset {offset} runs past its batch")
                qid, vp, kh, ctx, enc = unpack(buf, p)
                p += PREFIX_SIZE
                b = buf[p]
                if b < 0x80:
                    tsd = (b >> 1) ^ -(b & 1)
                    p += 1
                else:
                    tsd, p = decode_svarint(buf, p, rend)
                b = buf[p]
                if b == 1:  # zigzag(-1): null key
                    key = None
                    p += 1
                else:
                    if b < 0x80:
                        kl = b >> 1
                        p += 1
                        if b & 1:
                            raise CorruptBatchError(f"record at offset {offset}: negative key length")
                    else:
                        kl, p = decode_svarint(buf, p, rend)
                        if kl < 0:
                            raise CorruptBatchError(f"record at offset {offset}: negative key length")
                    key = bytes(buf[p : p + kl])
                    p += kl
                b = buf[p]
                if b < 0x80:
                    vl = b
                    p += 1
                else:
                    vl, p = decode_uvarint(buf, p, rend)
                value = bytes(buf[p : p + vl])
                p += vl
                if buf[p] == 0:
                    headers: Headers = ()
                    p += 1
                else:
                    hc, p = decode_uvarint(buf, p, rend)
                    headers, p = decode_headers(buf, p, rend, hc)
                    if drop_dedup and hc == 1 and headers[0][0] == DEDUP:
                        headers = ()
                if p != rend:
                    raise CorruptBatchError(f"record at offset {offset} does not end where its length says")
                r = new(Record)
                _SET_VALUE(r, value)
                _SET_QUEUE(r, qid)
                _SET_VP(r, vp)
                _SET_KEY_HASH(r, kh)
                _SET_CONTEXT(r, ctx)
                _SET_ENCODING(r, enc)
                _SET_KEY(r, key)
                _SET_HEADERS(r, headers)
                _SET_TIMESTAMP(r, first_ts + tsd)
                _SET_OFFSET(r, offset)
                append(r)
                offset += 1
        except (struct.error, UnicodeDecodeError, IndexError) as exc:
            raise CorruptBatchError(f"undecodable record: {exc}") from exc
        if p != end:
            raise CorruptBatchError(f"{end - p} bytes after the last record")
        return out


def iter_batches(buf: BytesLike, pos: int = 0, *, verify: bool = False) -> Iterator[BatchView]:
    """Yield the batches laid end to end in ``buf`` from ``pos``. Raises
    ``CorruptBatchError`` on a malformed or truncated batch, or (``verify=True``)
    on a CRC mismatch. A reader of :meth:`PartitionLog.read` output gets whole
    batches only, so any trailing fragment is corruption."""
    end = len(buf)
    while pos < end:
        view = BatchView(buf, pos)
        if verify and not view.verify_crc():
            raise CorruptBatchError(f"CRC mismatch in batch at {pos} (base offset {view.base_offset})")
        yield view
        pos += view.size


def decode_batches(buf: BytesLike, *, verify: bool = True) -> list[Record]:
    """Every record of every batch in ``buf`` (CRC-checked by default)."""
    out: list[Record] = []
    for view in iter_batches(buf, verify=verify):
        out.extend(view.records())
    return out

