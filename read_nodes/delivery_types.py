"""Values exchanged with ``GroupDelivery``: its configuration, what goes in
(``DeliveryEntry``, ``ConsumerSpec``), what comes out (``Delivery``,
``DeadLetter``, ``LagReport``, ``MemberInfo``) and its errors.

Pure values: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from vpq.codec.system_headers import MAX_PRIORITY
from vpq.isolation.context import IsolationContext
from vpq.virtual_partitions.hashing import HASH_SPACE, check_virtual_partitions

Ordering = Literal["key", "none"]

STREAM_PP_BITS = 32
_PP_MASK = (1 << STREAM_PP_BITS) - 1


def stream_of(pp: int, ctx_id: int) -> int:
    """One int for the records of one isolation context (interned id) in one pp.

    A group reads and acknowledges each stream on its own, so a context nobody
    consumes never holds back the others. Context id 0 (never handed out by
    ``metadata.contexts``) makes the stream equal to the pp: states kept per pp
    alone read as stream states of that pp."""
    return (ctx_id << STREAM_PP_BITS) | pp


def stream_pp(stream: int) -> int:
    return stream & _PP_MASK


def stream_ctx_id(stream: int) -> int:
    return stream >> STREAM_PP_BITS


class UnknownConsumer(KeyError):
    """The consumer id is not a member of the group (an API layer answers 404)."""

    def __init__(self, consumer_id: str) -> None:
        self.consumer_id = consumer_id
        super().__init__(f"unknown consumer {consumer_id!r}")

    def __str__(self) -> str:
        return str(self.args[0])


class DeliveryFull(RuntimeError):
    """``ingest`` was called while ``can_ingest(pp, offset)`` is False (the caller must pause tailing)."""


class Admission:
    """What ``GroupDelivery.admit`` says of the next record of a stream."""

    INGEST = "ingest"
    """hand it to ``ingest``"""
    PARK = "park"
    """its key holds its read-ahead: leave this and the key's later records in the log"""
    PAUSE = "pause"
    """enough is ready for the consumers: stop this stream here for now"""
    NOBODY = "nobody"
    """no live consumer may take its context: stop this stream here until one joins"""


def _positive(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class DeliveryConfig:
    """Per group-on-queue settings (from the queue's config and the node's settings).

    - ``ordering``: ``"key"`` (per (key, isolation context) order, the default) or ``"none"``.
    - ``max_deliveries``: a message delivered this many times and then nacked,
      timed out or released by a leaving consumer is dead-lettered.
    - ``visibility_timeout_ms``: an unacked delivery is redelivered after this long.
    - ``max_unacked``: bound on the messages held that some live consumer could take
      now (ready, not yet delivered): past it ``admit`` pauses new keys. Messages in
      flight, the read-ahead of keys waiting for an ack and messages of contexts no
      live consumer takes do not count, so they never hold back anything else.
    - ``key_read_ahead``: messages of one (key, context) held in memory before the
      key's later ones are parked in the log (``admit`` answers ``PARK``); at
      least the largest poll, so a hot key fills whole polls.
    - ``blocked_read_ahead``: bound on the messages held, over all keys, behind a
      run in flight; past it more of a blocked key's messages are parked.
    - ``max_acked_above``: bound on a pp's ack window, so a persisted pair form
      stays below 10,000 offsets (the default leaves headroom for holes re-read
      after a takeover; None: unbounded, what the read node's compact form uses).
    - ``virtual_partitions``: the queue's current V (``set_virtual_partitions`` changes it).
    - ``set_fallback``: the queue's set-fallback routing option.
    - ``steal_when_idle``: a consumer whose own vps have nothing ready takes ready
      messages of other members' vps (same routing, same per-key rule), so the
      group's last stragglers do not leave most consumers idle.
    """

    ordering: Ordering = "key"
    max_deliveries: int = 5
    visibility_timeout_ms: int = 30000
    max_unacked: int = 100_000
    max_acked_above: int | None = 9_000
    key_read_ahead: int = 1000
    blocked_read_ahead: int = 20_000
    virtual_partitions: int = 16
    set_fallback: bool = True
    steal_when_idle: bool = False

    def __post_init__(self) -> None:
        if self.ordering not in ("key", "none"):
            raise ValueError(f"ordering must be 'key' or 'none', got {self.ordering!r}")
        _positive(self.max_deliveries, "max_deliveries")
        _positive(self.visibility_timeout_ms, "visibility_timeout_ms")
        _positive(self.max_unacked, "max_unacked")
        _positive(self.key_read_ahead, "key_read_ahead")
        _positive(self.blocked_read_ahead, "blocked_read_ahead")
        if self.max_acked_above is not None:
            _positive(self.max_acked_above, "max_acked_above")
        check_virtual_partitions(self.virtual_partitions)


@dataclass(frozen=True, slots=True)
class DeliveryEntry:
    """One record of the queue, as the reader hands it to a group's delivery state.

    ``key_hash`` is the stored record hash (mmh3 of the key, or the keyless spread
    hash); the vp is ``key_hash mod V`` with the group's CURRENT V, computed by
    ``GroupDelivery`` itself, so entries stay valid across splits. ``key`` is None
    for keyless messages (no ordering constraint). The record's value and headers
    stay in the record cache, found by ``(pp, offset)``.
    """

    pp: int
    offset: int
    key_hash: int
    key: bytes | None
    ctx: IsolationContext
    timestamp_ms: int = 0
    ctx_id: int = 0
    priority: int = 0
    """The message's ``priority`` attribute, 0 to 9 (``codec.system_headers``)."""
    stream: int = field(default=0, init=False, repr=False, compare=False)
    """The (pp, context) stream the record is read and acknowledged in."""

    @classmethod
    def trusted(
        cls, pp: int, offset: int, key_hash: int, key: bytes | None, ctx: IsolationContext, timestamp_ms: int,
        ctx_id: int, priority: int = 0,
    ) -> DeliveryEntry:
        """Build without the checks, for values read from a verified record batch."""
        obj = _new(cls)
        _set_pp(obj, pp)
        _set_offset(obj, offset)
        _set_key_hash(obj, key_hash)
        _set_key(obj, key)
        _set_ctx(obj, ctx)
        _set_timestamp_ms(obj, timestamp_ms)
        _set_ctx_id(obj, ctx_id)
        _set_priority(obj, priority)
        _set_stream(obj, (ctx_id << STREAM_PP_BITS) | pp)
        return obj

    def __post_init__(self) -> None:
        for name in ("pp", "offset", "timestamp_ms", "ctx_id"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
        h = self.key_hash
        if not isinstance(h, int) or isinstance(h, bool) or not 0 <= h < HASH_SPACE:
            raise ValueError(f"key_hash must be an unsigned 32-bit integer, got {h!r}")
        p = self.priority
        if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p <= MAX_PRIORITY:
            raise ValueError(f"priority must be an integer 0 to {MAX_PRIORITY}, got {p!r}")
        if self.key is not None and not isinstance(self.key, bytes):
            raise ValueError(f"key must be bytes or None, got {type(self.key).__name__}")
        object.__setattr__(self, "stream", stream_of(self.pp, self.ctx_id))


# slot setters of DeliveryEntry for ``trusted`` (about 2x faster than object.__setattr__)
_new = object.__new__
(_set_pp, _set_offset, _set_key_hash, _set_key, _set_ctx, _set_timestamp_ms, _set_ctx_id, _set_priority,
 _set_stream) = (getattr(DeliveryEntry, name).__set__ for name in (
    "pp", "offset", "key_hash", "key", "ctx", "timestamp_ms", "ctx_id", "priority", "stream"))


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A live consumer of the group: its isolation context and the vps it owns there
    (from ``virtual_partitions.assignment``)."""

    ctx: IsolationContext
    vps: frozenset[int]

    def __init__(self, ctx: IsolationContext, vps: Iterable[int] = ()) -> None:
        object.__setattr__(self, "ctx", ctx)
        frozen = frozenset(vps)
        for vp in frozen:
            if not isinstance(vp, int) or isinstance(vp, bool) or vp < 0:
                raise ValueError(f"vps must be integers >= 0, got {vp!r}")
        object.__setattr__(self, "vps", frozen)


class Delivery(NamedTuple):
    """A message handed to a consumer. ``deadline_ms``: redelivered when not acked by then.
    (A named tuple: polls build one per message.)"""

    message_id: str
    pp: int
    offset: int
    vp: int
    key: bytes | None
    ctx: IsolationContext
    timestamp_ms: int
    delivery_count: int
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that reached ``max_deliveries`` without an ack. The service produces
    it to ``{queue}.{group}.dlq`` with header ``x-original-id: message_id`` and then
    calls ``confirm_dead_letters``. ``reason``: ``"timeout"``, ``"nack"`` or ``"left"``."""

    message_id: str
    entry: DeliveryEntry
    delivery_count: int
    reason: str


@dataclass(frozen=True, slots=True)
class LagReport:
    """Messages ingested and not yet acked nor dead-lettered (waiting, ready, in
    flight or delayed): total and broken down by lane, env and set of the messages,
    and by virtual partition (under the group's current V); ``oldest_ms``: the
    smallest record timestamp among them (None when there are none)."""

    total: int
    by_lane: dict[str, int]
    by_env: dict[str, int]
    by_set: dict[str, int]
    by_vp: dict[int, int] = field(default_factory=dict)
    oldest_ms: int | None = None
    oldest_by_context: dict[IsolationContext, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MemberInfo:
    """One consumer as the group sees it."""

    consumer_id: str
    ctx: IsolationContext
    vps: tuple[int, ...]
    inflight: int
    last_seen_ms: int
