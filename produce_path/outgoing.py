"""A produce request on its way to the write nodes, as columns, and its answer. Pure.

The produce path handles messages in bulk: the gateway decodes a request straight into
an :class:`OutgoingBatch` (one list per field), the router computes each column of the
routing at once, the accumulator concatenates the columns of many requests into one
magic-2 batch per partition (``codec.columnar``), and the answer is a
:class:`ProduceResults` (three int columns) written out as JSON in one go. Nothing
builds an object per message, which is what the produce path's CPU went to.

``OutgoingBatch.from_messages`` adapts message objects (``gateway.backend.ResolvedMessage``,
``produce_path.produce.PlainMessage``) for callers that have them (dead letters, the
validated-model path of the gateway, tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import itemgetter
from typing import Any, NamedTuple, Protocol

from vpq.codec.batch_common import VALUE_JSON, VALUE_RAW, encode_headers
from vpq.codec.columnar import decode_header_block
from vpq.codec.system_headers import DEDUP

BytesLike = Any
"""``bytes`` or any object with the buffer protocol and ``len`` (``msgspec.Raw``)."""


class OutgoingMessage(Protocol):
    """A message object ``OutgoingBatch.from_messages`` accepts. ``value`` holds the stored
    bytes (compact UTF-8 JSON when ``value_is_json``, else raw bytes); ``context`` has
    ``env``, ``set`` and ``lane``; ``timestamp_ms`` is optional (None: now)."""

    @property
    def key(self) -> str | None: ...

    @property
    def value(self) -> bytes: ...

    @property
    def value_is_json(self) -> bool: ...

    @property
    def headers(self) -> Mapping[str, str | bytes]: ...

    @property
    def context(self) -> Any: ...


class MessageView(NamedTuple):
    """One message of a batch, for code that wants objects (``OutgoingBatch.messages``)."""

    key: str | None
    value: bytes
    value_is_json: bool
    headers: dict[str, str]
    context: Any


def _pick(column: Sequence[Any], positions: Sequence[int]) -> list[Any]:
    if len(positions) == 1:
        return [column[positions[0]]]
    return list(itemgetter(*positions)(column))


class OutgoingBatch:
    """The messages of one produce request to one queue, one list per field (all of the
    same length n >= 1):

    * ``keys``: UTF-8 key bytes, None for a keyless message;
    * ``values``: the stored value bytes (bytes-like);
    * ``encodings``: one byte per message, ``VALUE_JSON`` or ``VALUE_RAW``;
    * ``headers``: the encoded header block of each message (``b""`` for none), or None
      when no message has headers;
    * ``header_bytes``: the UTF-8 bytes of each message's header names and values (what
      ``max_message_bytes`` counts), or None when no message has headers;
    * ``context``: the isolation context of every message, or None with ``contexts`` one
      per message;
    * ``timestamps``: each message's own timestamp in ms (None: the append time), or None;
    * ``spread_keys``: for each keyless message, the bytes its route is hashed from instead
      of the queue's spreader (its ``dedup_id``, so that a retry reaches the same
      partition), None per message or for the whole column when there is none.
    """

    __slots__ = (
        "keys", "values", "encodings", "headers", "header_bytes", "context", "contexts", "timestamps", "spread_keys",
        "_value_lengths", "_value_bytes"
    )  # fmt: skip

    def __init__(
        self,
        keys: list[bytes | None],
        values: list[BytesLike],
        encodings: bytes,
        *,
        context: Any = None,
        contexts: list[Any] | None = None,
        headers: list[bytes] | None = None,
        header_bytes: list[int] | None = None,
        timestamps: list[int | None] | None = None,
        spread_keys: list[bytes | None] | None = None,
    ) -> None:
        n = len(values)
        if n == 0:
            raise ValueError("a produce batch holds at least one message")
        if len(keys) != n or len(encodings) != n:
            raise ValueError("every column needs one entry per message")
        if (context is None) == (contexts is None):
            raise ValueError("give either one context for all messages or one per message")
        columns = (
            ("contexts", contexts), ("headers", headers), ("header_bytes", header_bytes),
            ("timestamps", timestamps), ("spread_keys", spread_keys),
        )  # fmt: skip
        for name, col in columns:
            if col is not None and len(col) != n:
                raise ValueError(f"{name} needs one entry per message")
        if (headers is None) != (header_bytes is None):
            raise ValueError("headers and header_bytes go together")
        self.keys = keys
        self.values = values
        self.encodings = encodings
        self.context = context
        self.contexts = contexts
        self.headers = headers
        self.header_bytes = header_bytes
        self.timestamps = timestamps
        self.spread_keys = spread_keys
        self._value_lengths: list[int] | None = None
        self._value_bytes = -1

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def from_messages(cls, messages: Sequence[OutgoingMessage]) -> OutgoingBatch:
        """The columns of message objects (header values given as ``str`` are stored as
        UTF-8; a keyless message's reserved ``:dedup`` header is its spread key)."""
        keys: list[bytes | None] = []
        values: list[bytes] = []
        encodings = bytearray()
        contexts: list[Any] = []
        blocks: list[bytes] = []
        sizes: list[int] = []
        stamps: list[int | None] = []
        spread: list[bytes | None] = []
        for m in messages:
            keys.append(None if m.key is None else m.key.encode("utf-8"))
            dedup = m.headers.get(DEDUP) if m.key is None and m.headers else None
            spread.append(None if dedup is None else dedup.encode("utf-8") if isinstance(dedup, str) else bytes(dedup))
            values.append(m.value)
            encodings.append(VALUE_JSON if m.value_is_json else VALUE_RAW)
            contexts.append(m.context)
            raw = m.headers
            if raw:
                pairs = tuple((k, v.encode("utf-8") if isinstance(v, str) else bytes(v)) for k, v in raw.items())
                blocks.append(encode_headers(pairs))
                sizes.append(sum(len(k.encode("utf-8")) + len(v) for k, v in pairs))
            else:
                blocks.append(b"")
                sizes.append(0)
            stamps.append(getattr(m, "timestamp_ms", None))
        first = contexts[0] if contexts else None
        one_context = all(c == first for c in contexts)
        has_headers = any(blocks)
        return cls(
            keys,
            values,
            bytes(encodings),
            context=first if one_context else None,
            contexts=None if one_context else contexts,
            headers=blocks if has_headers else None,
            header_bytes=sizes if has_headers else None,
            timestamps=stamps if any(s is not None for s in stamps) else None,
            spread_keys=spread if any(s is not None for s in spread) else None,
        )

    def take(self, positions: Sequence[int]) -> OutgoingBatch:
        """The messages at ``positions`` (non-empty), in that order."""
        enc = self.encodings
        return OutgoingBatch(
            _pick(self.keys, positions),
            _pick(self.values, positions),
            bytes(enc[i] for i in positions),
            context=self.context,
            contexts=None if self.contexts is None else _pick(self.contexts, positions),
            headers=None if self.headers is None else _pick(self.headers, positions),
            header_bytes=None if self.header_bytes is None else _pick(self.header_bytes, positions),
            timestamps=None if self.timestamps is None else _pick(self.timestamps, positions),
            spread_keys=None if self.spread_keys is None else _pick(self.spread_keys, positions),
        )

    def sizes(self) -> list[int]:
        """Each message's size as ``max_message_bytes`` counts it: key + value + header
        names and values, in bytes."""
        out = [len(v) + (0 if k is None else len(k)) for k, v in zip(self.keys, self.values)]
        if self.header_bytes is not None:
            out = [a + b for a, b in zip(out, self.header_bytes)]
        return out

    def encoded_bytes(self, per_record: int) -> int:
        """``sum(encoded_sizes(per_record))``, from whole columns."""
        keys = self.keys
        key_bytes = sum(len(k) for k in keys if k is not None) if None in keys else sum(map(len, keys))  # type: ignore[arg-type]
        header_bytes = 0 if self.headers is None else sum(map(len, self.headers))
        return per_record * len(self.values) + self.value_bytes() + key_bytes + header_bytes

    def encoded_sizes(self, per_record: int) -> list[int]:
        """Each message's bytes in a batch: ``per_record`` fixed bytes, key, value, header block."""
        values, keys = self.values, self.keys
        if None in keys:
            out = [per_record + len(v) + (0 if k is None else len(k)) for k, v in zip(keys, values)]
        else:
            out = [per_record + len(v) + len(k) for k, v in zip(keys, values)]  # type: ignore[arg-type]
        if self.headers is not None:
            out = [s + len(h) for s, h in zip(out, self.headers)]
        return out

    def first_over(self, limit: int) -> tuple[int, int] | None:
        """``(index, size)`` of the first message larger than ``limit`` bytes, or None.
        Cheap when nothing is close to the limit (a bound from the largest fields)."""
        keys = self.keys
        if None in keys:
            key_max = max((len(k) for k in keys if k is not None), default=0)
        else:
            key_max = max(map(len, keys))  # type: ignore[arg-type]
        bound = max(self.value_lengths()) + key_max
        if self.header_bytes is not None:
            bound += max(self.header_bytes)
        if bound <= limit:
            return None
        for i, size in enumerate(self.sizes()):
            if size > limit:
                return i, size
        return None

    def value_lengths(self) -> list[int]:
        """Each value's length in bytes (computed once: the values are read in one pass)."""
        if self._value_lengths is None:
            self._value_lengths = list(map(len, self.values))
        return self._value_lengths

    def value_bytes(self) -> int:
        """Bytes of all the values (computed once)."""
        if self._value_bytes < 0:
            self._value_bytes = sum(self.value_lengths())
        return self._value_bytes

    def context_at(self, i: int) -> Any:
        return self.context if self.contexts is None else self.contexts[i]

    def messages(self) -> Iterator[MessageView]:
        """The messages as objects (keys and header values decoded as UTF-8)."""
        for i, (key, value, enc) in enumerate(zip(self.keys, self.values, self.encodings)):
            headers: dict[str, str] = {}
            if self.headers is not None and self.headers[i]:
                block = self.headers[i]
                headers = {k: v.decode("utf-8", "replace") for k, v in decode_header_block(block, 0, len(block), i)}
            yield MessageView(
                None if key is None else key.decode("utf-8", "replace"),
                bytes(value),
                enc == VALUE_JSON,
                headers,
                self.context_at(i),
            )


_RESULT = b'{"id":"%d-%d","partition":%d,"offset":%d,"virtual_partition":%d}'

results_json: Callable[[list[int], list[int], list[int]], bytes] | None
try:  # the same bytes as ProduceResults.json's Python loop, in one C call
    from vpq.produce_path._fast_results import results_json
except ImportError:  # no C compiler at install: the Python loop
    results_json = None


class ProduceResults:
    """Where each message of a produce request was stored, in request order: three int
    columns. The message id is ``"<partition>-<offset>"`` (``codec.message_id``)."""

    __slots__ = ("partitions", "offsets", "virtual_partitions")

    def __init__(self, partitions: list[int], offsets: list[int], virtual_partitions: list[int]) -> None:
        if not len(partitions) == len(offsets) == len(virtual_partitions):
            raise ValueError("every column needs one entry per message")
        self.partitions = partitions
        self.offsets = offsets
        self.virtual_partitions = virtual_partitions

    def __len__(self) -> int:
        return len(self.offsets)

    def dicts(self) -> list[dict[str, Any]]:
        """One ``{"id", "partition", "offset", "virtual_partition"}`` per message."""
        return [
            {"id": f"{pp}-{off}", "partition": pp, "offset": off, "virtual_partition": vp}
            for pp, off, vp in zip(self.partitions, self.offsets, self.virtual_partitions)
        ]

    def json(self) -> bytes:
        """``{"results": [...]}`` as API.md fixes it, encoded without building the dicts
        (by ``_fast_results`` where it is built)."""
        if results_json is not None:
            return results_json(self.partitions, self.offsets, self.virtual_partitions)
        return self.json_python()

    def json_python(self) -> bytes:
        """What ``json`` answers, by the Python loop."""
        fmt = _RESULT
        return (
            b'{"results":['
            + b",".join([fmt % (pp, off, pp, off, vp) for pp, off, vp in zip(self.partitions, self.offsets, self.virtual_partitions)])
            + b"]}"
        )
