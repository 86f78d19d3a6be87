"""What the SDK sends and what comes back, as in API.md. Pure: encoding and parsing only.

Values: any JSON value is sent as ``value``; ``bytes`` (or ``bytearray``/``memoryview``)
are sent as ``value_b64``. A consumed message has ``value`` set to the JSON value, or to
``bytes`` when it was produced as bytes (JSON cannot hold bytes, so the two never clash).
"""

from __future__ import annotations

import base64
import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, overload

import orjson

_BYTES_TYPES = (bytes, bytearray, memoryview)


@dataclass(frozen=True)
class ProduceMessage:
    """One message to produce. ``None`` isolation fields are left out of the request, so
    the request's ``X-Lane``/``X-Env``/``X-Set`` headers (or the server defaults) apply.
    ``dedup_id`` (1-128 printable ASCII characters): within the queue's
    ``dedup_window_ms`` a message with the same id is stored once; ``None`` lets the
    client give it one (``DedupIds``)."""

    value: Any = None
    key: str | None = None
    headers: Mapping[str, str] | None = None
    lane: str | None = None
    env: str | None = None
    set: str | None = None
    dedup_id: str | None = None


class DedupIds:
    """Dedup ids unique to this object: ``"<random 128-bit hex>-<sequence>"`` (at most
    54 characters), so that ids of different producers and processes never meet. One id
    per message, fixed when the message is first serialised: every retry of that message
    sends the same id."""

    __slots__ = ("prefix", "_next")

    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = uuid.uuid4().hex if prefix is None else prefix
        self._next = 0

    def next(self) -> str:
        n = self._next
        self._next = n + 1
        return f"{self.prefix}-{n}"


@dataclass(frozen=True)
class ProduceResult:
    """Where a produced message was durably stored."""

    id: str
    partition: int
    offset: int
    virtual_partition: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProduceResult:
        return cls(
            id=str(data["id"]),
            partition=int(data["partition"]),
            offset=int(data["offset"]),
            virtual_partition=int(data["virtual_partition"]),
        )


class ProduceResults(Sequence[ProduceResult]):
    """The results of one produce call, in request order: a read-only sequence of
    :class:`ProduceResult` built on first access (a producer sending thousands of messages a
    second rarely looks at every result, and building them all cost the client more than
    encoding the request)."""

    __slots__ = ("_raw", "_built")

    def __init__(self, raw: list[Mapping[str, Any]]) -> None:
        self._raw = raw
        self._built: list[ProduceResult | None] = [None] * len(raw)

    def __len__(self) -> int:
        return len(self._raw)

    @overload
    def __getitem__(self, index: int) -> ProduceResult: ...

    @overload
    def __getitem__(self, index: slice) -> list[ProduceResult]: ...

    def __getitem__(self, index: int | slice) -> ProduceResult | list[ProduceResult]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        r = self._built[index]
        if r is None:
            r = self._built[index] = ProduceResult.from_json(self._raw[index])
        return r

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"ProduceResults({list(self)!r})"


_new_object = object.__new__
_set_attribute = object.__setattr__
_WIRE_FIELDS = frozenset((
    "id", "queue", "key", "value", "headers", "lane", "env", "set", "partition", "offset", "virtual_partition",
    "timestamp_ms", "delivery_count",
))  # fmt: skip
"""The fields of a message in a poll answer (API.md), as the server sends them."""


@dataclass(frozen=True)
class Message:
    """A delivered message (one element of a poll answer)."""

    id: str
    queue: str
    value: Any
    key: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    lane: str = ""
    env: str = "prod"
    set: str = ""
    partition: int = -1
    offset: int = -1
    virtual_partition: int = -1
    timestamp_ms: int = 0
    delivery_count: int = 1

    @property
    def is_bytes(self) -> bool:
        """True when the message was produced as bytes (``value_b64``)."""
        return isinstance(self.value, bytes)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Message:
        """The message of one element of a poll answer. An object of exactly the API's
        fields (``value``, not ``value_b64``) and a non-empty ``env`` (the server's own
        answer) is taken as it is, a copy of it; any other is read field by field, with
        the types and defaults of this class (``value_b64`` decoded to bytes)."""
        if data.keys() == _WIRE_FIELDS and data["env"]:
            fields = dict(data)
            headers = fields["headers"]
            fields["headers"] = dict(headers) if headers else {}
            message = _new_object(cls)
            _set_attribute(message, "__dict__", fields)
            return message
        if "value" in data:
            value: Any = data["value"]
        elif "value_b64" in data:
            value = base64.b64decode(data["value_b64"])
        else:
            value = None
        get = data.get
        headers = get("headers")
        # one dict update instead of the frozen dataclass __init__ (a setattr per field):
        # a poll answer builds hundreds of these
        message = _new_object(cls)
        message.__dict__.update(
            id=str(data["id"]),
            queue=str(get("queue", "")),
            value=value,
            key=get("key"),
            headers=dict(headers) if headers else {},
            lane=str(get("lane") or ""),
            env=str(get("env") or "prod"),
            set=str(get("set") or ""),
            partition=int(get("partition", -1)),
            offset=int(get("offset", -1)),
            virtual_partition=int(get("virtual_partition", -1)),
            timestamp_ms=int(get("timestamp_ms", 0)),
            delivery_count=int(get("delivery_count", 1)),
        )
        return message

    @classmethod
    def from_wire(cls, items: list[Any]) -> list[Message]:
        """The messages of a poll answer's ``messages``, freshly parsed and given over to
        them: an object of exactly the API's fields, a non-empty ``env`` and an object of
        ``headers`` becomes the message's attributes as it is (no copy); any other is
        read by :meth:`from_json`. The same messages as ``from_json`` of each."""
        out: list[Message] = []
        append = out.append
        new = _new_object
        for data in items:
            if type(data) is dict and data.keys() == _WIRE_FIELDS and data["env"] and type(data["headers"]) is dict:
                message = new(cls)
                _set_attribute(message, "__dict__", data)
                append(message)
            else:
                append(cls.from_json(data))
        return out

    def to_json(self) -> dict[str, Any]:
        """The API's JSON shape again (``value_b64`` for bytes)."""
        out: dict[str, Any] = {"id": self.id, "queue": self.queue, "key": self.key}
        if self.is_bytes:
            out["value_b64"] = base64.b64encode(self.value).decode("ascii")
        else:
            out["value"] = self.value
        out.update(
            headers=self.headers,
            lane=self.lane,
            env=self.env,
            set=self.set,
            partition=self.partition,
            offset=self.offset,
            virtual_partition=self.virtual_partition,
            timestamp_ms=self.timestamp_ms,
            delivery_count=self.delivery_count,
        )
        return out


@dataclass(frozen=True)
class JoinResult:
    """Answer of a join: the consumer's id and how long it may stay silent between polls."""

    consumer_id: str
    session_timeout_ms: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JoinResult:
        return cls(consumer_id=str(data["consumer_id"]), session_timeout_ms=int(data.get("session_timeout_ms", 10000)))


class QueueInfo(TypedDict, total=False):
    """A queue as the gateway describes it: config, ``placement`` (pp of vp 0, vp 1, ...) at
    map ``epoch``, ``traffic`` (messages_total, bytes_total, messages_per_s, bytes_per_s)."""

    name: str
    virtual_partitions: int
    ordering: str
    max_deliveries: int
    visibility_timeout_ms: int
    retention_ms: int
    max_message_bytes: int
    dedup_window_ms: int
    epoch: int
    placement: list[int]
    traffic: dict[str, Any]


class GroupInfo(TypedDict, total=False):
    """A consumer group: its members and its lag (total, by lane, by env, by set)."""

    members: list[dict[str, Any]]
    lag: dict[str, Any]


class ClusterInfo(TypedDict, total=False):
    """Write nodes, read nodes, physical partitions and the current map epoch."""

    write_nodes: list[dict[str, Any]]
    read_nodes: list[dict[str, Any]]
    physical_partitions: list[dict[str, Any]]
    epoch: int


class MapQueue(TypedDict):
    virtual_partitions: int
    placement: list[int]


class CurrentMap(TypedDict):
    """``GET /v1/maps/current``: the placement of every queue at one epoch."""

    epoch: int
    queues: dict[str, MapQueue]


def encode_message(message: ProduceMessage | Mapping[str, Any]) -> dict[str, Any]:
    """The JSON object for one message of a produce request.

    A mapping is taken as the API shape (``key``, ``value`` or ``value_b64``, ``headers``,
    ``lane``, ``env``, ``set``, ``dedup_id``); a bytes ``value`` in it is turned into ``value_b64``.
    """
    if isinstance(message, ProduceMessage):
        out: dict[str, Any] = {}
        if message.key is not None:
            out["key"] = message.key
        if isinstance(message.value, _BYTES_TYPES):
            out["value_b64"] = base64.b64encode(bytes(message.value)).decode("ascii")
        else:
            out["value"] = message.value
        if message.headers:
            out["headers"] = dict(message.headers)
        for name in ("lane", "env", "set", "dedup_id"):
            v = getattr(message, name)
            if v is not None:
                out[name] = v
        return out
    value = message.get("value")
    if not isinstance(value, _BYTES_TYPES):
        return message  # type: ignore[return-value]  # already the API shape: serialised as it is
    out = dict(message)
    del out["value"]
    out["value_b64"] = base64.b64encode(bytes(value)).decode("ascii")
    return out


def dump_message(message: ProduceMessage | Mapping[str, Any]) -> bytes:
    """``encode_message`` serialised to JSON bytes. Raises ``TypeError`` for values JSON
    cannot represent (so bad input fails at the call site, before any request)."""
    try:
        return orjson.dumps(encode_message(message))
    except orjson.JSONEncodeError as exc:
        raise TypeError(f"message is not JSON-serialisable: {exc}") from exc


def produce_body(encoded: list[bytes]) -> bytes:
    """The produce request body from already-serialised messages."""
    return b'{"messages":[' + b",".join(encoded) + b"]}"


def dump_produce_body(messages: Sequence[ProduceMessage | Mapping[str, Any]]) -> bytes:
    """The produce request body of ``messages``, serialised in ONE call (``TypeError`` for a
    value JSON cannot represent). Serialising each message on its own and joining the pieces
    costs several times more for messages of a kilobyte or more, as each piece is a new
    buffer."""
    try:
        return orjson.dumps({"messages": [encode_message(m) for m in messages]})
    except orjson.JSONEncodeError as exc:
        raise TypeError(f"message is not JSON-serialisable: {exc}") from exc


def with_dedup_id(message: ProduceMessage | Mapping[str, Any], ids: DedupIds) -> ProduceMessage | Mapping[str, Any]:
    """``message`` with a dedup id from ``ids`` unless it has one already."""
    if isinstance(message, ProduceMessage):
        return message if message.dedup_id is not None else dataclasses.replace(message, dedup_id=ids.next())
    if message.get("dedup_id") is not None:
        return message
    return {**message, "dedup_id": ids.next()}
