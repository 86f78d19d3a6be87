"""The common produce body decoded straight into columns. Pure, no I/O.

Most produce requests are *plain*::

    {"messages": [{"value": <any JSON>, "key": <str or null, optional>,
                   "headers": <object of strings, optional>,
                   "lane"/"env"/"set": <isolation name or null, optional>,
                   "delay_ms"/"deliver_at_ms"/"priority"/"dedup_id": <optional>}, ...]}   # 1..MAX_BATCH_MESSAGES

``decode_plain`` decodes such a body with msgspec in one C pass (types checked, unknown
fields refused) into an ``OutgoingBatch`` (``produce_path.outgoing``) without building a
model, a dict or a ``str`` per message: each value stays the exact JSON text the producer
sent (``msgspec.Raw``, no copy until the batch is encoded), so nothing is parsed into
Python objects only to be serialised again. It answers ``None`` for anything else (a
``value_b64``, a missing or extra field, a wrong type, an invalid isolation name, a bad
length, malformed JSON, a reserved header name, both ``delay_ms`` and ``deliver_at_ms``,
a due time too far away), which then goes through orjson and the pydantic models, so every error
and every unusual message is handled in one place, the models. The property test in
``tests/gateway/test_produce_decode.py`` holds the two paths to the same messages.

The stored value of a JSON message is the value's JSON text as sent (insignificant
whitespace included); the models' path stores orjson's compact encoding. Both are the
same JSON value, and a poll gives back that value.

msgspec's scan of a raw value is laxer than orjson's parse in two ways, so the short path
accepts exactly what orjson accepts (what the rest of the platform and the SDK parse
with): a body that is not ASCII must be valid UTF-8 (msgspec does not check the bytes
inside a raw string), and values that can hold numbers (objects, arrays, numbers) are
parsed once, all together, by orjson, which refuses numbers beyond a double's range
(``1e400``). Strings, ``true``, ``false`` and ``null`` need neither.
"""

from __future__ import annotations

import struct
import time
from operator import attrgetter
from typing import Annotated, Any

import msgspec
import orjson

from vpq.codec.batch_common import VALUE_JSON, encode_headers
from vpq.codec.system_headers import DEDUP, MAX_DEDUP_ID_CHARS, MAX_PRIORITY, RESERVED_PREFIX, attribute_headers
from vpq.codec.varint import encode_uvarint
from vpq.gateway.models import (
    ISOLATION_PATTERN,
    MAX_BATCH_MESSAGES,
    MAX_DELIVER_AT_MS,
    MAX_MESSAGE_DELAY_MS,
    due_time,
)
from vpq.isolation.context import IsolationError, PartialContext, resolve
from vpq.produce_path.outgoing import OutgoingBatch

IsolationName = Annotated[str, msgspec.Meta(pattern=ISOLATION_PATTERN)]


# gc=False: decoded messages hold no container that could point back at them (no cycle),
# so the collector need not track the thousands a second the gateway decodes
class PlainMessage(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    value: msgspec.Raw
    key: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    lane: IsolationName | None = None
    env: IsolationName | None = None
    set_: IsolationName | None = msgspec.field(default=None, name="set")
    delay_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_MESSAGE_DELAY_MS)] | None = None
    deliver_at_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_DELIVER_AT_MS)] | None = None
    priority: Annotated[int, msgspec.Meta(ge=0, le=MAX_PRIORITY)] = 0
    # 1-128 characters here; printable ASCII (models.DEDUP_ID_PATTERN) is checked for all
    # the ids of a body at once (_dedup_blocks, _with_attributes): one C call, not a regex each
    dedup_id: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_DEDUP_ID_CHARS)] | None = None


class PlainBody(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    messages: Annotated[list[PlainMessage], msgspec.Meta(min_length=1, max_length=MAX_BATCH_MESSAGES)]


_DECODER = msgspec.json.Decoder(PlainBody)
_SAFE_FIRST_BYTES = frozenset(b'"tfn')  # strings, true, false, null: no number inside
_FIRST_BYTE = struct.Struct("B")
_SAFE_FIRSTS = frozenset((b,) for b in _SAFE_FIRST_BYTES)  # as _FIRST_BYTE.unpack_from gives them
_VALUE, _KEY, _HEADERS = attrgetter("value"), attrgetter("key"), attrgetter("headers")
_DELAY, _DELIVER_AT, _PRIORITY = attrgetter("delay_ms"), attrgetter("deliver_at_ms"), attrgetter("priority")
_DEDUP_ID, _ISOLATION = attrgetter("dedup_id"), attrgetter("env", "set_", "lane")


def decode_plain(raw: bytes, request_context: PartialContext, now_ms: int | None = None) -> OutgoingBatch | None:
    """The columns of a plain body, each message's isolation context resolved from its own
    fields, else the request's isolation headers (``request_context``), else the defaults;
    None when ``raw`` is not a plain body (see the module docstring). ``now_ms`` is the
    receipt time a ``delay_ms`` counts from (default: now)."""
    try:
        body = _DECODER.decode(raw)
        if not raw.isascii():
            raw.decode("utf-8")
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
        return None
    messages = body.messages
    n = len(messages)
    values = list(map(_VALUE, messages))
    if not set(map(_FIRST_BYTE.unpack_from, values)) <= _SAFE_FIRSTS:
        parsed = [v for v in values if memoryview(v)[0] not in _SAFE_FIRST_BYTES]
        try:
            orjson.loads(b"[" + b",".join(parsed) + b"]")
        except orjson.JSONDecodeError:
            return None
    keys = list(map(_KEY, messages))
    if None in keys:
        key_bytes: list[bytes | None] = [None if k is None else k.encode() for k in keys]
    else:
        key_bytes = list(map(str.encode, keys))  # type: ignore[arg-type]
    headers = list(map(_HEADERS, messages))
    with_headers = any(headers)
    if with_headers and any(h and any(k.startswith(RESERVED_PREFIX) for k in h) for h in headers):
        return None
    spread_keys: list[bytes | None] | None = None
    blocks: list[bytes] | None = None
    sizes: list[int] | None = None
    timed = (
        any(map(_DELAY, messages))
        or any(map(_PRIORITY, messages))
        or list(map(_DELIVER_AT, messages)).count(None) != n
    )
    with_dedup = list(map(_DEDUP_ID, messages)).count(None) != n
    if not timed and not with_headers and with_dedup:
        try:  # the SDK's usual batch: a dedup id on each message and nothing else
            blocks, sizes, spread_keys = _dedup_blocks(messages)
        except ValueError:
            return None
    elif timed or with_dedup:
        try:
            headers, spread_keys = _with_attributes(messages, headers, now_ms)
        except ValueError:
            return None
    if blocks is None and any(headers):
        blocks, sizes = [], []
        for h in headers:
            if h:
                pairs = tuple((k, v.encode()) for k, v in h.items())
                blocks.append(encode_headers(pairs))
                sizes.append(sum(len(k.encode()) + len(v) for k, v in pairs))
            else:
                blocks.append(b"")
                sizes.append(0)
    try:
        context, contexts = _contexts(messages, request_context)
    except IsolationError:
        return None
    return OutgoingBatch(
        key_bytes,
        values,
        bytes([VALUE_JSON]) * n,
        context=context,
        contexts=contexts,
        headers=blocks,
        header_bytes=sizes,
        spread_keys=spread_keys,
    )


_DEDUP_BLOCK = encode_uvarint(1) + encode_uvarint(len(DEDUP)) + DEDUP.encode()
_LENGTHS = [encode_uvarint(n) for n in range(MAX_DEDUP_ID_CHARS + 1)]


def _dedup_blocks(messages: list[PlainMessage]) -> tuple[list[bytes], list[int], list[bytes | None] | None]:
    """The header blocks, header sizes and spread keys of messages whose only header is
    their ``dedup_id`` (the bytes ``_with_attributes`` and ``encode_headers`` would give).
    ValueError when an id is not printable ASCII (``models.DEDUP_ID_PATTERN``)."""
    ids = [m.dedup_id for m in messages]
    text = "".join([d for d in ids if d is not None])
    if not (text.isascii() and text.isprintable()):
        raise ValueError("dedup_id not printable ASCII")
    raws: list[bytes | None] = [None if d is None else d.encode() for d in ids]
    present = [r for r in raws if r is not None]
    head, lengths, extra = _DEDUP_BLOCK, _LENGTHS, len(DEDUP)
    if len(present) == len(raws):
        blocks = [head + lengths[len(r)] + r for r in present]
        sizes = [extra + len(r) for r in present]
    else:
        blocks = [b"" if r is None else head + lengths[len(r)] + r for r in raws]
        sizes = [0 if r is None else extra + len(r) for r in raws]
    spread: list[bytes | None] | None = None
    if any(m.key is None for m in messages):
        spread = [r if m.key is None else None for m, r in zip(messages, raws)]
        if not any(k is not None for k in spread):
            spread = None
    return blocks, sizes, spread


def _with_attributes(
    messages: list[PlainMessage], headers: list[dict[str, str]], now_ms: int | None
) -> tuple[list[dict[str, str]], list[bytes | None] | None]:
    """Each message's headers with its platform attributes in front (reserved names,
    ``codec.system_headers``), and the spread keys of keyless messages with a dedup id.
    ValueError for both ``delay_ms`` and ``deliver_at_ms`` or a due time too far away."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    out: list[dict[str, str]] = []
    spread: list[bytes | None] = []
    for m, h in zip(messages, headers):
        if m.delay_ms is not None and m.deliver_at_ms is not None:
            raise ValueError("both delay_ms and deliver_at_ms")
        if m.dedup_id is not None and not (m.dedup_id.isascii() and m.dedup_id.isprintable()):
            raise ValueError("dedup_id not printable ASCII")  # msgspec's "$" lets a final newline in
        reserved = attribute_headers(due_time(m.delay_ms, m.deliver_at_ms, now), m.priority, m.dedup_id)
        out.append({k: v.decode() for k, v in reserved} | h if reserved else h)
        spread.append(m.dedup_id.encode() if m.key is None and m.dedup_id is not None else None)
    return out, spread if any(k is not None for k in spread) else None


def _contexts(messages: list[PlainMessage], request_context: PartialContext) -> tuple[Any, list[Any] | None]:
    """One context for every message, or one per message (resolved once per distinct
    combination of fields)."""
    fields = list(map(_ISOLATION, messages))
    first = fields[0]
    if fields.count(first) == len(fields):
        return resolve(PartialContext(*first), request_context), None
    seen: dict[tuple[str | None, str | None, str | None], Any] = {}
    for f in fields:
        if f not in seen:
            seen[f] = resolve(PartialContext(*f), request_context)
    return None, [seen[f] for f in fields]

