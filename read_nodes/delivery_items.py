"""The records ``GroupDelivery`` keeps: a held message (``Msg``), the one deadline of a
poll (``Timer``), the messages of one (key, context) (``Chain``) and a member
(``Consumer``). Plain slotted records, no logic beyond their construction.
"""

from __future__ import annotations

from collections import deque

from vpq.isolation.context import IsolationContext
from vpq.read_nodes.delivery_types import STREAM_PP_BITS, DeliveryEntry

WAITING, READY, INFLIGHT, DELAYED = range(4)

Pos = tuple[int, int]
ChainKey = tuple[bytes, IsolationContext]
ParkKey = tuple[int, int]
"""(context id, key hash) of a parked key."""


class Msg:
    """A held message: the record's fields as ``DeliveryEntry`` names them (one object
    per held record, no entry beside it) and its delivery state; ``pos``: its
    ``(pp, offset)``, the key of ``GroupDelivery._msgs``; ``stream``: its (pp, context)
    stream (``delivery_types.stream_of``)."""

    __slots__ = (
        "seq",
        "pp",
        "offset",
        "key_hash",
        "key",
        "ctx",
        "timestamp_ms",
        "ctx_id",
        "priority",
        "stream",
        "pos",
        "chain",
        "state",
        "holder",
        "count",
        "due",
        "timer",
    )

    def __init__(
        self,
        seq: int,
        pp: int,
        offset: int,
        key_hash: int,
        key: bytes | None,
        ctx: IsolationContext,
        timestamp_ms: int,
        ctx_id: int,
        priority: int,
        pos: Pos,
        chain: Chain | None,
    ) -> None:
        self.seq = seq
        self.pp = pp
        self.offset = offset
        self.key_hash = key_hash
        self.key = key
        self.ctx = ctx
        self.timestamp_ms = timestamp_ms
        self.ctx_id = ctx_id
        self.priority = priority
        self.stream = (ctx_id << STREAM_PP_BITS) | pp
        self.pos = pos
        self.chain = chain
        self.state = WAITING
        self.holder: str | None = None
        self.count = 0
        self.due: int | None = None
        self.timer: Timer | None = None

    @property
    def entry(self) -> DeliveryEntry:
        """The record as a ``DeliveryEntry`` (built on each call: for dead letters and reports)."""
        return DeliveryEntry.trusted(
            self.pp, self.offset, self.key_hash, self.key, self.ctx, self.timestamp_ms, self.ctx_id, self.priority
        )


class Timer:
    """One deadline shared by the messages of one poll (or one nack delay). A message
    leaves it when it is acked, failed or redelivered (``live`` counts those still on
    it); once none is left the list is dropped, so a stale entry holds nothing."""

    __slots__ = ("due", "msgs", "live")

    def __init__(self, due: int, msgs: list[Msg]) -> None:
        self.due = due
        self.msgs: list[Msg] | None = msgs
        self.live = len(msgs)


class Chain:
    """The messages of one (key, context) held here: ``pending`` (not in flight, in
    key order; its head may be delayed by a nack) and ``run`` (in flight, in key
    order: the one run the key may have out). ``counted``: how many of ``pending``
    count as blocked read-ahead (all of them while a run is out, else none)."""

    __slots__ = ("key", "parked_key", "pending", "run", "counted")

    def __init__(self, key: ChainKey, parked_key: ParkKey) -> None:
        self.key = key
        self.parked_key = parked_key
        self.pending: deque[Msg] = deque()
        self.run: dict[Msg, None] = {}  # in flight, in key order (insertion order)
        self.counted = 0


class Consumer:
    """A member; ``inflight``: the messages in flight to it, by the message id it was
    handed (``pp-offset``), so that an ack finds them by the ids it sends back."""

    __slots__ = ("ctx", "vps", "inflight", "last_seen")

    def __init__(self, ctx: IsolationContext, vps: frozenset[int], last_seen: int) -> None:
        self.ctx = ctx
        self.vps = vps
        self.inflight: dict[str, Msg] = {}
        self.last_seen = last_seen


def check_now(now_ms: object) -> int:
    if not isinstance(now_ms, int) or isinstance(now_ms, bool):
        raise ValueError(f"now_ms must be an integer, got {now_ms!r}")
    return now_ms
