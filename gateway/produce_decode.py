"""The common produce body decoded straight into columns. Pure, no I/O.

Most produce requests are *plain*::

    {"messages": [{"value": <any JSON>, "key": <str or null, optional>,
                   "headers": <object of strings, optional>,
                   "lane"/"env"/"set": <isolation name or null, optional>}, ...]}   # 1..MAX_BATCH_MESSAGES

``decode_plain`` decodes such a body with msgspec in one C pass (types checked, unknown
fields refused) into an ``OutgoingBatch`` (``produce_path.outgoing``) without building a
model, a dict or a ``str`` per message: each value stays the exact JSON text the producer
sent (``msgspec.Raw``, no copy until the batch is encoded), so nothing is parsed into
Python objects only to be serialised again. It answers ``None`` for anything else (a
``value_b64``, a missing or extra field, a wrong type, an invalid isolation name, a bad
length, malformed JSON), which then goes through orjson and the pydantic models, so every error
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

from typing import Annotated, Any

import msgspec
import orjson

from vpq.codec.batch_common import VALUE_JSON, encode_headers
from vpq.gateway.models import ISOLATION_PATTERN, MAX_BATCH_MESSAGES
from vpq.isolation.context import IsolationError, PartialContext, resolve
from vpq.produce_path.outgoing import OutgoingBatch

IsolationName = Annotated[str, msgspec.Meta(pattern=ISOLATION_PATTERN)]


class PlainMessage(msgspec.Struct, forbid_unknown_fields=True):
    value: msgspec.Raw
    key: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    lane: IsolationName | None = None
    env: IsolationName | None = None
    set_: IsolationName | None = msgspec.field(default=None, name="set")


class PlainBody(msgspec.Struct, forbid_unknown_fields=True):
    messages: Annotated[list[PlainMessage], msgspec.Meta(min_length=1, max_length=MAX_BATCH_MESSAGES)]


_DECODER = msgspec.json.Decoder(PlainBody)
_SAFE_FIRST_BYTES = frozenset(b'"tfn')  # strings, true, false, null: no number inside


def decode_plain(raw: bytes, request_context: PartialContext) -> OutgoingBatch | None:
    """The columns of a plain body, each message's isolation context resolved from its own
    fields, else the request's isolation headers (``request_context``), else the defaults;
    None when ``raw`` is not a plain body (see the module docstring)."""
    try:
        body = _DECODER.decode(raw)
        if not raw.isascii():
            raw.decode("utf-8")
    except (msgspec.ValidationError, msgspec.DecodeError, UnicodeDecodeError):
        return None
    messages = body.messages
    values = [m.value for m in messages]
    parsed = [v for v in values if memoryview(v)[0] not in _SAFE_FIRST_BYTES]
    if parsed:
        try:
            orjson.loads(b"[" + b",".join(parsed) + b"]")
        except orjson.JSONDecodeError:
            return None
    keys = [m.key for m in messages]
    if None in keys:
        key_bytes: list[bytes | None] = [None if k is None else k.encode() for k in keys]
    else:
        key_bytes = [k.encode() for k in keys]  # type: ignore[union-attr]
    headers = [m.headers for m in messages]
    blocks: list[bytes] | None = None
    sizes: list[int] | None = None
    if any(headers):
        blocks, sizes = [], []
        for h in headers:
            if h:
                pairs = tuple((k, v.encode()) for k, v in h.items())
                blocks.append(encode_headers(pairs))
                sizes.append(sum(len(k.encode()) + len(v) for k, v in pairs))
            else:
                blocks.append(b"")
                sizes.append(0)
    n = len(messages)
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
    )


def _contexts(messages: list[PlainMessage], request_context: PartialContext) -> tuple[Any, list[Any] | None]:
    """One context for every message, or one per message (resolved once per distinct
    combination of fields)."""
    fields = [(m.env, m.set_, m.lane) for m in messages]
    first = fields[0]
    if fields.count(first) == len(fields):
        return resolve(PartialContext(*first), request_context), None
    seen: dict[tuple[str | None, str | None, str | None], Any] = {}
    for f in fields:
        if f not in seen:
            seen[f] = resolve(PartialContext(*f), request_context)
    return None, [seen[f] for f in fields]

