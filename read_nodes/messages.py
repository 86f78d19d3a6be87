"""Tailed records and the public message objects a poll answers.

A read node decodes each record it tails once and keeps it in the record cache
as a ``TailedRecord`` (the fields of ``codec.records.Record`` plus its partition and
resolved isolation context). ``render_message`` turns one into the object
API.md fixes for a poll (``MessageRenderer`` into its JSON bytes, which is what a
poll answers)::

    {"id", "queue", "key", "value" | "value_b64", "headers", "lane", "env", "set",
     "partition", "offset", "virtual_partition", "timestamp_ms", "delivery_count"}

Decisions:

- ``value_encoding`` 0 (JSON): the stored bytes are parsed with orjson and
  answered as ``"value"`` (``MessageRenderer`` splices the checked bytes in as they
  are: the producer's own JSON text, which the gateway stores, so the same value,
  a number too long for a double included); should they not parse (never produced by the gateway,
  which stores compact JSON), they are answered as ``"value_b64"`` instead.
  Encoding 1 (raw bytes): ``"value_b64"`` (standard base64).
- ``key``: None for a keyless message, else the key bytes decoded as UTF-8.
  The public API only accepts string keys, so keys are always UTF-8 in
  practice; a key that is not (an internal producer's) is answered with U+FFFD
  replacement characters in ``"key"`` AND its exact bytes in an extra field
  ``"key_b64"`` (the response models allow extra fields).
- header values are bytes on disk and strings in the API: decoded as UTF-8
  (invalid sequences replaced by U+FFFD). Only the producer's own headers are
  shown, never the platform's reserved ones (``codec.system_headers``).

Pure logic: no I/O.
"""

from __future__ import annotations

import base64
from typing import Any, NamedTuple

import orjson

from vpq.codec.batch_common import VALUE_JSON, Headers
from vpq.codec.records import Record
from vpq.codec.system_headers import RESERVED_PREFIX, user_headers
from vpq.isolation.context import IsolationContext

_loads = orjson.loads
_b64 = base64.b64encode

RECORD_OVERHEAD_BYTES = 480
"""Python memory of one cached record beyond its key and value bytes: the
``TailedRecord`` tuple and its integers, the key and value objects' own headers, the
cache's key tuple and its ordered-dict entry (about 460 bytes in all, measured with
tracemalloc on 1 KiB records), so that the cache's byte bound is what the process
really holds."""

HEADER_OVERHEAD_BYTES = 146
"""Python memory of one header beyond its name and value bytes: the (name, value)
tuple (56), the str (49) and bytes (33) objects and the pointer in the record's header
tuple (8), by ``sys.getsizeof``; the header tuple itself adds ``HEADERS_BYTES``. Every
delayed or prioritised message carries a reserved header (``codec.system_headers``),
so counting less would let the cache hold far more than its bound."""
HEADERS_BYTES = 40


class TailedRecord(NamedTuple):
    """A decoded record of physical partition ``pp`` with its isolation context: the
    fields of ``codec.records.Record`` under the same names, flat in one tuple (a read
    node holds one per cached record, built in bulk by ``record_decode``). A record
    whose only header was its dedup id holds no headers: nothing a read node does uses
    the id (``BatchView.records(drop_dedup=True)``)."""

    pp: int
    ctx: IsolationContext
    offset: int
    key: bytes | None
    value: bytes
    headers: Headers
    timestamp_ms: int | None
    value_encoding: int
    queue_id: int
    context_id: int
    key_hash: int
    virtual_partition: int

    def size_bytes(self) -> int:
        """Footprint declared to the record cache (payload plus a fixed overhead)."""
        return record_size(self)


def record_size(r: Record | TailedRecord) -> int:
    """``TailedRecord.size_bytes`` of a ``TailedRecord`` holding ``r``'s fields."""
    key = r.key
    size = RECORD_OVERHEAD_BYTES + len(r.value) + (len(key) if key is not None else 0)
    headers = r.headers
    if headers:
        size += HEADERS_BYTES + HEADER_OVERHEAD_BYTES * len(headers)
        for name, value in headers:
            size += len(name) + len(value)
    return size


def tailed_record(pp: int, record: Record, ctx: IsolationContext) -> TailedRecord:
    """The ``TailedRecord`` of a decoded ``Record`` (a record read one at a time)."""
    return TailedRecord(
        pp, ctx, record.offset, record.key, record.value, record.headers, record.timestamp_ms, record.value_encoding,
        record.queue_id, record.context_id, record.key_hash, record.virtual_partition,
    )  # fmt: skip


def decode_key(key: bytes | None) -> tuple[str | None, str | None]:
    """``(key as text, key_b64)``: key_b64 is None unless the bytes are not UTF-8."""
    if key is None:
        return None, None
    try:
        return key.decode("utf-8"), None
    except UnicodeDecodeError:
        return key.decode("utf-8", "replace"), base64.b64encode(key).decode("ascii")


def decode_headers(headers: tuple[tuple[str, bytes], ...]) -> dict[str, str]:
    return {name: value.decode("utf-8", "replace") for name, value in headers}


def render_message(
    queue: str, tailed: TailedRecord, virtual_partition: int, delivery_count: int
) -> dict[str, Any]:
    """The public message object of one delivery (see the module docstring)."""
    r = tailed
    ctx = tailed.ctx
    raw_key = r.key
    key_b64 = None
    if raw_key is None:
        key = None
    else:
        try:
            key = raw_key.decode("utf-8")
        except UnicodeDecodeError:
            key, key_b64 = decode_key(raw_key)
    pp = tailed.pp
    offset = r.offset
    # pp and offset come from the log, so the id needs no range checks (encode_message_id)
    msg: dict[str, Any] = {"id": f"{pp}-{offset}", "queue": queue, "key": key}
    if r.value_encoding == VALUE_JSON:
        try:
            msg["value"] = _loads(r.value)
        except orjson.JSONDecodeError:
            msg["value_b64"] = _b64(r.value).decode("ascii")
    else:
        msg["value_b64"] = _b64(r.value).decode("ascii")
    msg["headers"] = decode_headers(user_headers(r.headers)) if r.headers else {}
    msg["lane"] = ctx.lane
    msg["env"] = ctx.env
    msg["set"] = ctx.set
    msg["partition"] = pp
    msg["offset"] = offset
    msg["virtual_partition"] = virtual_partition
    ts = r.timestamp_ms
    msg["timestamp_ms"] = ts if ts is not None else 0
    msg["delivery_count"] = delivery_count
    if key_b64 is not None:
        msg["key_b64"] = key_b64
    return msg


try:
    from vpq.read_nodes._fast_render import render_many as _render_many
except ImportError:  # built without a C compiler: MessageRenderer.render does every message
    _render_many = None

_MESSAGE = (
    b'{"id":"%d-%d","queue":%b,"key":%b,%b%b,"headers":%b,%b,"partition":%d,"offset":%d,"virtual_partition":%d,'
    b'"timestamp_ms":%d,"delivery_count":%d%b}'
)
_dumps = orjson.dumps
_CONTEXTS_HELD = 1024
_KEYS_HELD = 4096


class MessageRenderer:
    """``render_message`` of one queue's messages straight into JSON bytes: the same
    object, fields in the same order, without building it. A JSON value is checked
    with orjson (as ``render_message`` does) and answered as the stored bytes, which
    are therefore valid JSON; other values as ``render_message`` answers them.
    Not thread-safe; holds the JSON of the isolation contexts and (UTF-8) keys met
    last (at most 1,024 and 4,096: when full, it starts again)."""

    __slots__ = ("_queue", "_contexts", "_keys")

    def __init__(self, queue: str) -> None:
        self._queue = _dumps(queue)
        self._contexts: dict[IsolationContext, bytes] = {}
        self._keys: dict[bytes, bytes] = {}  # UTF-8 key -> its JSON string

    def _context(self, ctx: IsolationContext) -> bytes:
        got = self._contexts.get(ctx)
        if got is None:
            if len(self._contexts) >= _CONTEXTS_HELD:
                self._contexts.clear()
            got = self._contexts[ctx] = _dumps({"lane": ctx.lane, "env": ctx.env, "set": ctx.set})[1:-1]
        return got

    def _key(self, raw_key: bytes) -> bytes | None:
        """The JSON string of a UTF-8 key (remembered); None for bytes that are not UTF-8."""
        got = self._keys.get(raw_key)
        if got is None:
            try:
                got = _dumps(raw_key.decode("utf-8"))
            except UnicodeDecodeError:
                return None
            if len(self._keys) >= _KEYS_HELD:
                self._keys.clear()
            self._keys[raw_key] = got
        return got

    def render(self, tailed: TailedRecord, virtual_partition: int, delivery_count: int) -> bytes:
        """The JSON bytes of ``render_message(queue, tailed, virtual_partition, delivery_count)``."""
        r = tailed
        raw_key = r.key
        key_b64 = None
        if raw_key is None:
            key = b"null"
        else:
            key = self._keys.get(raw_key)
            if key is None:
                key = self._key(raw_key)
                if key is None:
                    text, key_b64 = decode_key(raw_key)
                    key = _dumps(text)
        value = r.value
        if r.value_encoding == VALUE_JSON:
            try:
                _loads(value)
                name = b'"value":'
            except orjson.JSONDecodeError:
                name, value = b'"value_b64":"', _b64(value) + b'"'
        else:
            name, value = b'"value_b64":"', _b64(value) + b'"'
        headers = r.headers
        if not headers or (len(headers) == 1 and headers[0][0].startswith(RESERVED_PREFIX)):
            headers_json = b"{}"  # none of the producer's own (a dedup id alone, usually)
        else:
            headers_json = _headers_json(headers)
        ctx_json = self._contexts.get(tailed.ctx)
        if ctx_json is None:
            ctx_json = self._context(tailed.ctx)
        ts = r.timestamp_ms
        pp = tailed.pp
        offset = r.offset
        return _MESSAGE % (
            pp, offset, self._queue, key, name, value, headers_json, ctx_json, pp, offset, virtual_partition,
            ts if ts is not None else 0, delivery_count,
            b"" if key_b64 is None else b',"key_b64":"' + key_b64.encode("ascii") + b'"',
        )

    def render_many(self, records: list[TailedRecord], vps: list[int], counts: list[int]) -> list[bytes]:
        """``[render(r, vp, count) for r, vp, count in zip(records, vps, counts)]``: the
        usual message (a JSON value, a UTF-8 key, no headers of the producer's) by the C
        extension ``_fast_render`` when it is built (which checks the JSON itself where
        it can tell that orjson accepts it), the others by ``render``."""
        if _render_many is None:
            return list(map(self.render, records, vps, counts))
        out = _render_many(self._queue, self._keys, self._key, self._contexts, self._context, _loads, RESERVED_PREFIX,
                           records, vps, counts)  # fmt: skip
        if None in out:
            render = self.render
            for i, got in enumerate(out):
                if got is None:
                    out[i] = render(records[i], vps[i], counts[i])
        return out


def _headers_json(headers: tuple[tuple[str, bytes], ...]) -> bytes:
    """The producer's own headers (``user_headers``, decoded as ``decode_headers``) as a JSON object."""
    own = {name: value.decode("utf-8", "replace") for name, value in headers if not name.startswith(RESERVED_PREFIX)}
    return _dumps(own) if own else b"{}"


def poll_body(messages: list[bytes]) -> bytes:
    """A poll's answer, ``{"messages": [...]}``, of rendered messages (one copy of
    them: the brackets go onto the first and last message, not around the whole)."""
    if not messages:
        return b'{"messages":[]}'
    if len(messages) == 1:
        return b'{"messages":[' + messages[0] + b"]}"
    ends = [b'{"messages":[' + messages[0], *messages[1:-1], messages[-1] + b"]}"]
    return b",".join(ends)
