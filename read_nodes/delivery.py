"""``GroupDelivery``: the delivery state of ONE consumer group on ONE queue.

This is where guarantees 2 (at-least-once), 3 (per-key order), 4 (consumers
decoupled from partitions) and 5 (isolation, decided at delivery time) live.
Pure logic: no I/O, no clock (time comes in as ``now_ms``), no asyncio; the
read-node service wraps it, feeds it records and persists ``ack_state()``.

Inputs
  ``ingest(entry)``: records of the queue, in an order the caller guarantees is
  lineage order per vp (so ingestion order is the order of each key). Idempotent:
  a record already ingested, dead-lettered or done is skipped (returns False), so
  the caller may re-read from ``low_watermark`` at any time.
  ``mark_scanned(pp, offset)``: every record of the queue in ``pp`` below
  ``offset`` has been passed to ``ingest`` (call it only after ingesting).
  ``set_consumers`` / ``join`` / ``leave``: live consumers with their isolation
  context and the vps they own there (from the assignment).

Delivery rule (``poll``)
  A message is deliverable when it is not in flight, not delayed by a nack, and
  (``ordering == "key"``, keyed message) every earlier message with the same
  (key, isolation context) is acked or dead-lettered. It goes to the consumer
  whose context is ``route(message context)`` over the contexts of the live
  consumers *now* (env strict; lane, then backbone; set, then default set) and
  who owns ``key_hash mod V`` there. Redeliveries come before first deliveries,
  then ingestion order. With ``steal_when_idle``, a consumer with nothing ready in
  its own vps takes what is ready in the others' (same routing): owned vps steer
  work, they never decide order, which the per-key rule alone keeps; and when work
  is scarce (every member of the context already holds a message, and fewer are
  ready than a full poll for each) a poll takes only its fair share,
  ``ceil(ready / members)``, so the end of a backlog is spread over the members.
  Each delivery increments ``delivery_count`` and sets a visibility deadline
  ``now_ms + visibility_timeout_ms``.

Failure paths
  A delivery not acked by its deadline (``expire``), nacked (``nack``, optional
  delay) or held by a consumer that leaves (``leave``, ``set_consumers``) is
  delivered again, to whoever owns it then, unless it has been delivered
  ``max_deliveries`` times: then it is dead-lettered, which counts as done for
  ordering at once and for ``ack_state`` once the service, having produced it to
  the DLQ (``take_dead_letters``), calls ``confirm_dead_letters``.

Time: every method given ``now_ms`` first applies the timeouts due by then
(``expire``); ``ack`` only accepts a message still in flight to that consumer.

Cost: ``poll`` is ``O(b + k log b)`` for ``k`` messages returned from ``b``
non-empty (message context, vp) buckets the consumer sees (blocked keys are
never scanned: a key's next message becomes ready only when the previous one is
done); ``ack``/``nack``/``ingest`` are ``O(log n)`` per message. Memory: at most
``max_unacked`` outstanding messages, and per pp an ack window of at most
``max_acked_above`` offsets (``can_ingest(pp, offset)``).

Persistence: ``ack_state()`` gives per pp ``(low_watermark, acked_above)`` (the
form ``metadata.acks`` stores), ``compact_ack_state()`` a form bounded by the
outstanding messages; ``restore`` takes either (see ``read_nodes.ack_tracker``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from sortedcontainers import SortedList

from isolation.context import IsolationContext
from isolation.routing import Router
from read_nodes.ack_tracker import AckStateLike, AckTracker, PartitionAckState
from read_nodes.delivery_types import (
    ConsumerSpec,
    DeadLetter,
    Delivery,
    DeliveryConfig,
    DeliveryEntry,
    DeliveryFull,
    LagReport,
    MemberInfo,
    UnknownConsumer,
)
from read_nodes.message_id import decode_message_ids, encode_message_id
from read_nodes.ready_buckets import FIRST_DELIVERY, REDELIVERY, ReadyBuckets
from read_nodes.routing_table import RouterFactory, RoutingTable
from virtual_partitions.hashing import check_virtual_partitions

_WAITING, _READY, _INFLIGHT, _DELAYED = range(4)

Pos = tuple[int, int]
ChainKey = tuple[bytes, IsolationContext]


class _Msg:
    __slots__ = ("seq", "entry", "chain", "state", "holder", "count", "due")

    def __init__(self, seq: int, entry: DeliveryEntry, chain: ChainKey | None) -> None:
        self.seq = seq
        self.entry = entry
        self.chain = chain
        self.state = _WAITING
        self.holder: str | None = None
        self.count = 0
        self.due: int | None = None


class _Consumer:
    __slots__ = ("ctx", "vps", "inflight", "last_seen")

    def __init__(self, ctx: IsolationContext, vps: frozenset[int], last_seen: int) -> None:
        self.ctx = ctx
        self.vps = vps
        self.inflight: set[Pos] = set()
        self.last_seen = last_seen


def _check_now(now_ms: object) -> int:
    if not isinstance(now_ms, int) or isinstance(now_ms, bool):
        raise ValueError(f"now_ms must be an integer, got {now_ms!r}")
    return now_ms


class GroupDelivery:
    """Delivery state of one group on one queue (see the module docstring).

    ``router_factory(live_contexts)`` returns the routing function for a set of
    live consumer contexts; the default is ``isolation.routing.Router`` with the
    config's ``set_fallback``.
    """

    def __init__(self, config: DeliveryConfig, router_factory: RouterFactory | None = None) -> None:
        self._config = config
        self._key_order = config.ordering == "key"
        self._v = config.virtual_partitions
        self._mask = self._v - 1
        if router_factory is None:
            fallback = config.set_fallback
            router_factory = lambda live: Router(live, fallback).route  # noqa: E731
        self._routes = RoutingTable(router_factory)
        self._consumers: dict[str, _Consumer] = {}
        self._msgs: dict[Pos, _Msg] = {}
        self._chains: dict[ChainKey, deque[_Msg]] = {}
        self._ready: ReadyBuckets[IsolationContext, _Msg] = ReadyBuckets()
        self._timers: SortedList = SortedList()  # (due_ms, seq, pp, offset) of in-flight and delayed
        self._ctx_count: dict[IsolationContext, int] = {}
        self._tracker = AckTracker()
        self._dead_untaken: dict[Pos, DeadLetter] = {}
        self._dead_taken: dict[Pos, DeadLetter] = {}
        self._seq = 0
        self._members_by_ctx: dict[IsolationContext, int] = {}
        self._inflight_by_ctx: dict[IsolationContext, int] = {}

    # ------------------------------------------------------------------ config
    @property
    def config(self) -> DeliveryConfig:
        return self._config

    @property
    def virtual_partitions(self) -> int:
        return self._v

    def set_virtual_partitions(self, virtual_partitions: int) -> None:
        """Adopt a larger V after a split: vps are re-projected from the stored key
        hashes (per-key order is unaffected). ValueError when V would shrink."""
        check_virtual_partitions(virtual_partitions)
        if virtual_partitions < self._v:
            raise ValueError(f"virtual_partitions may only grow ({self._v} -> {virtual_partitions})")
        if virtual_partitions == self._v:
            return
        self._v = virtual_partitions
        self._mask = virtual_partitions - 1
        for ctx, prio, seq, msg in self._ready.drain():
            self._ready.push(ctx, msg.entry.key_hash & self._mask, prio, seq, msg)

    # ------------------------------------------------------------- membership
    def _consumer(self, consumer_id: str) -> _Consumer:
        c = self._consumers.get(consumer_id)
        if c is None:
            raise UnknownConsumer(consumer_id)
        return c

    def _check_vps(self, consumer_id: str, vps: frozenset[int], virtual_partitions: int) -> None:
        if not isinstance(consumer_id, str) or not consumer_id:
            raise ValueError(f"consumer id must be a non-empty string, got {consumer_id!r}")
        bad = [vp for vp in vps if vp >= virtual_partitions]
        if bad:
            raise ValueError(
                f"consumer {consumer_id!r}: vp {min(bad)} out of range for {virtual_partitions} virtual partitions"
            )

    def _reroute(self) -> None:
        self._routes.rebuild((c.ctx for c in self._consumers.values()), self._ctx_count)
        members: dict[IsolationContext, int] = {}
        for c in self._consumers.values():
            members[c.ctx] = members.get(c.ctx, 0) + 1
        self._members_by_ctx = members

    def _release_all(self, consumer_id: str, now_ms: int) -> int:
        c = self._consumers[consumer_id]
        msgs = sorted((self._msgs[pos] for pos in c.inflight), key=lambda m: m.seq)
        for msg in msgs:
            self._fail(msg, "left", 0, now_ms)
        return len(msgs)

    def set_consumers(
        self, consumers: Mapping[str, ConsumerSpec], now_ms: int, virtual_partitions: int | None = None
    ) -> list[str]:
        """Make ``consumers`` the live members, with their contexts and owned vps
        (typically straight from a new assignment, whose V is ``virtual_partitions``).

        Members not listed leave (their in-flight messages are redelivered to others
        at once); a member whose context changed leaves and rejoins. Returns the ids
        that left. Owned vps only steer work: correctness (order, at-least-once) does
        not depend on the assignment being complete or exclusive.
        """
        _check_now(now_ms)
        new_v = self._v if virtual_partitions is None else virtual_partitions
        check_virtual_partitions(new_v)
        if new_v < self._v:
            raise ValueError(f"virtual_partitions may only grow ({self._v} -> {new_v})")
        for cid, spec in consumers.items():
            if not isinstance(spec, ConsumerSpec):
                raise ValueError(f"consumer {cid!r}: expected a ConsumerSpec, got {type(spec).__name__}")
            self._check_vps(cid, spec.vps, new_v)
        self.set_virtual_partitions(new_v)
        self.expire(now_ms)
        left: list[str] = []
        for cid, c in list(self._consumers.items()):
            spec = consumers.get(cid)
            if spec is None or spec.ctx != c.ctx:
                self._release_all(cid, now_ms)
                del self._consumers[cid]
                if spec is None:
                    left.append(cid)
        for cid, spec in consumers.items():
            c = self._consumers.get(cid)
            if c is None:
                self._consumers[cid] = _Consumer(spec.ctx, spec.vps, now_ms)
            else:
                c.vps = spec.vps
        self._reroute()
        return left

    def join(self, consumer_id: str, ctx: IsolationContext, vps: Iterable[int], now_ms: int) -> None:
        """Add (or update) one member; counts as its heartbeat. Other members keep
        their vps: when the assignment moves vps, follow with ``set_consumers`` (or
        use it directly) with the whole new assignment."""
        specs = {cid: ConsumerSpec(c.ctx, c.vps) for cid, c in self._consumers.items()}
        specs[consumer_id] = ConsumerSpec(ctx, vps)
        self.set_consumers(specs, now_ms)
        c = self._consumers[consumer_id]
        c.last_seen = max(c.last_seen, now_ms)

    def set_vps(self, consumer_id: str, vps: Iterable[int]) -> None:
        """Change the vps one member owns (UnknownConsumer when not a member)."""
        c = self._consumer(consumer_id)
        frozen = ConsumerSpec(c.ctx, vps).vps
        self._check_vps(consumer_id, frozen, self._v)
        c.vps = frozen

    def leave(self, consumer_id: str, now_ms: int) -> int:
        """Remove a member; its unacked messages become deliverable to others at once
        (or are dead-lettered when they reached ``max_deliveries``). Returns how many
        it held. UnknownConsumer when not a member."""
        _check_now(now_ms)
        self._consumer(consumer_id)
        self.expire(now_ms)
        released = self._release_all(consumer_id, now_ms)
        del self._consumers[consumer_id]
        self._reroute()
        return released

    def idle_consumers(self, now_ms: int, session_timeout_ms: int) -> list[str]:
        """Members that have not polled (nor joined) for ``session_timeout_ms``."""
        return sorted(cid for cid, c in self._consumers.items() if now_ms - c.last_seen >= session_timeout_ms)

    def is_member(self, consumer_id: str) -> bool:
        return consumer_id in self._consumers

    # -------------------------------------------------------------- ingestion
    def outstanding(self) -> int:
        """Ingested messages not yet done, plus dead letters not yet confirmed."""
        return len(self._msgs) + len(self._dead_untaken) + len(self._dead_taken)

    def can_ingest(self, pp: int | None = None, offset: int | None = None) -> bool:
        """False when ``max_unacked`` messages are outstanding, or (given ``pp``) when
        the pp's ack window (outstanding + done offsets above its low watermark)
        reached ``max_acked_above``: pause ingesting (that pp). Given ``offset`` too:
        a record pending from a ``restore`` or filling a hole below the highest done
        offset is always accepted, so a takeover can make progress."""
        tracker = self._tracker
        if pp is not None and offset is not None and (tracker.is_tracked(pp, offset) or tracker.is_hole(pp, offset)):
            return True
        if self.outstanding() >= self._config.max_unacked:
            return False
        cap = self._config.max_acked_above
        return pp is None or cap is None or tracker.window(pp) < cap

    def ingest(self, entry: DeliveryEntry) -> bool:
        """Add a record; False when it is already known or already done (skipped).

        DeliveryFull when ``can_ingest(entry.pp, entry.offset)`` is False.
        """
        pos = (entry.pp, entry.offset)
        if pos in self._msgs or pos in self._dead_untaken or pos in self._dead_taken:
            return False
        tracker = self._tracker
        if tracker.is_done(entry.pp, entry.offset):
            return False
        if not self.can_ingest(entry.pp, entry.offset):
            raise DeliveryFull(
                f"cannot ingest pp {entry.pp}: {self.outstanding()} messages outstanding (max_unacked "
                f"{self._config.max_unacked}), ack window {tracker.window(entry.pp)} (max_acked_above "
                f"{self._config.max_acked_above})"
            )
        tracker.track(entry.pp, entry.offset)
        chain = (entry.key, entry.ctx) if self._key_order and entry.key is not None else None
        msg = _Msg(self._seq, entry, chain)
        self._seq += 1
        self._msgs[pos] = msg
        ctx = entry.ctx
        n = self._ctx_count.get(ctx)
        self._ctx_count[ctx] = 1 if n is None else n + 1
        self._routes.add(ctx)
        if chain is not None:
            q = self._chains.get(chain)
            if q is not None:
                q.append(msg)
                return True
            self._chains[chain] = deque((msg,))
        self._make_ready(msg)
        return True

    def mark_scanned(self, pp: int, offset: int) -> None:
        """Every record of the queue in ``pp`` below ``offset`` has been passed to
        ``ingest`` (ingested or skipped). Advances the persisted state; never call it
        ahead of ingestion, or the records in between count as done."""
        self._tracker.mark_scanned(pp, offset)

    # ---------------------------------------------------------------- delivery
    def _make_ready(self, msg: _Msg) -> None:
        msg.state = _READY
        prio = REDELIVERY if msg.count else FIRST_DELIVERY
        self._ready.push(msg.entry.ctx, msg.entry.key_hash & self._mask, prio, msg.seq, msg)

    def poll(self, consumer_id: str, max_messages: int, now_ms: int) -> list[Delivery]:
        """Up to ``max_messages`` messages for ``consumer_id`` (its heartbeat too)."""
        _check_now(now_ms)
        c = self._consumer(consumer_id)
        if now_ms > c.last_seen:
            c.last_seen = now_ms
        self.expire(now_ms)
        steal = self._config.steal_when_idle
        if max_messages <= 0 or not (c.vps or steal):
            return []
        sources = self._routes.sources(c.ctx)
        if steal:
            max_messages = self._fair_share(c.ctx, sources, max_messages)
        taken = self._ready.take(sources, c.vps, max_messages) if c.vps else []
        if not taken and steal:
            taken = self._ready.take(sources, None, max_messages)
        deadline = now_ms + self._config.visibility_timeout_ms
        out: list[Delivery] = []
        mask = self._mask
        for msg in taken:
            e = msg.entry
            msg.state = _INFLIGHT
            msg.holder = consumer_id
            msg.count += 1
            msg.due = deadline
            self._timers.add((deadline, msg.seq, e.pp, e.offset))
            c.inflight.add((e.pp, e.offset))
            out.append(
                Delivery(
                    encode_message_id(e.pp, e.offset), e.pp, e.offset, e.key_hash & mask, e.key, e.ctx,
                    e.timestamp_ms, msg.count, deadline,
                )
            )
        if out:
            self._inflight_by_ctx[c.ctx] = self._inflight_by_ctx.get(c.ctx, 0) + len(out)
        return out

    def _fair_share(self, ctx: IsolationContext, sources: Iterable[IsolationContext], max_messages: int) -> int:
        """How many messages a poll of a member of ``ctx`` may take: ``max_messages``,
        unless work is scarce: the members of ``ctx`` already hold at least one message
        each in flight (they are busy, not keeping up with a trickle) and what they can
        see ready is less than a full poll for each of them. Then a poll takes its fair
        share, ``ceil(ready / members)`` (at least 1), so the end of a backlog is spread
        over the members instead of going, a whole poll at a time, to whoever asks first
        while the others run dry."""
        members = self._members_by_ctx.get(ctx, 0)
        if members < 2 or self._inflight_by_ctx.get(ctx, 0) < members:
            return max_messages
        ready = self._ready.count_for(sources, None)
        if ready >= members * max_messages:
            return max_messages
        return max(1, -(-ready // members))

    def has_ready(self, consumer_id: str) -> bool:
        """True when ``poll`` would return something now (before new timeouts): for
        waking long polls. UnknownConsumer when not a member."""
        c = self._consumer(consumer_id)
        if self._config.steal_when_idle:
            return self._ready.any_for(self._routes.sources(c.ctx), None)
        return bool(c.vps) and self._ready.any_for(self._routes.sources(c.ctx), c.vps)

    def _clear_timer(self, msg: _Msg) -> None:
        if msg.due is not None:
            e = msg.entry
            self._timers.remove((msg.due, msg.seq, e.pp, e.offset))
            msg.due = None
        if msg.holder is not None:
            holder = self._consumers[msg.holder]
            pos = (msg.entry.pp, msg.entry.offset)
            if pos in holder.inflight:
                holder.inflight.remove(pos)
                self._inflight_by_ctx[holder.ctx] -= 1
            msg.holder = None

    def _finish(self, msg: _Msg, dead: DeadLetter | None) -> None:
        """Acked (``dead`` None) or dead-lettered: done for delivery and order."""
        self._clear_timer(msg)
        e = msg.entry
        pos = (e.pp, e.offset)
        del self._msgs[pos]
        n = self._ctx_count[e.ctx] - 1
        if n:
            self._ctx_count[e.ctx] = n
        else:
            del self._ctx_count[e.ctx]
        if dead is None:
            self._tracker.done(e.pp, e.offset)
        else:
            self._dead_untaken[pos] = dead
        if msg.chain is not None:
            q = self._chains[msg.chain]
            head = q.popleft()
            if head is not msg:  # pragma: no cover - invariant: only a key's head is ever delivered
                raise AssertionError(f"message {dead or pos} finished while not the head of its key")
            if q:
                if q[0].state == _WAITING:
                    self._make_ready(q[0])
            else:
                del self._chains[msg.chain]

    def _fail(self, msg: _Msg, reason: str, delay_ms: int, now_ms: int) -> None:
        """An in-flight delivery was not acked: deliver again, or dead-letter."""
        if msg.count >= self._config.max_deliveries:
            e = msg.entry
            self._finish(msg, DeadLetter(encode_message_id(e.pp, e.offset), e, msg.count, reason))
            return
        self._clear_timer(msg)
        if delay_ms > 0:
            msg.state = _DELAYED
            msg.due = now_ms + delay_ms
            e = msg.entry
            self._timers.add((msg.due, msg.seq, e.pp, e.offset))
        else:
            self._make_ready(msg)

    def expire(self, now_ms: int) -> int:
        """Apply timeouts due at ``now_ms``: deliveries past their visibility deadline
        are redelivered (or dead-lettered), nack delays that elapsed end. Returns how
        many messages changed state."""
        _check_now(now_ms)
        timers = self._timers
        n = 0
        while timers and timers[0][0] <= now_ms:
            _, _, pp, offset = timers.pop(0)
            msg = self._msgs[(pp, offset)]
            msg.due = None
            if msg.state == _DELAYED:
                self._make_ready(msg)
            else:
                self._fail(msg, "timeout", 0, now_ms)
            n += 1
        return n

    def next_due_ms(self) -> int | None:
        """The earliest pending visibility deadline or nack delay end, if any."""
        return self._timers[0][0] if self._timers else None

    def _held(self, consumer_id: str, positions: Iterable[Pos]) -> list[_Msg]:
        out: list[_Msg] = []
        seen: set[Pos] = set()
        for pos in positions:
            msg = self._msgs.get(pos)
            if msg is not None and msg.holder == consumer_id and msg.state == _INFLIGHT and pos not in seen:
                seen.add(pos)
                out.append(msg)
        return out

    def ack(self, consumer_id: str, ids: Iterable[str]) -> int:
        """Acknowledge messages in flight to ``consumer_id``; returns how many were.
        Ids not in flight to this consumer (unknown, already acked, timed out, held
        by another) are ignored. MessageIdError (nothing changes) on a malformed id;
        UnknownConsumer when not a member."""
        self._consumer(consumer_id)
        held = self._held(consumer_id, decode_message_ids(list(ids)))
        for msg in held:
            self._finish(msg, None)
        return len(held)

    def nack(self, consumer_id: str, ids: Iterable[str], delay_ms: int, now_ms: int) -> int:
        """Give messages in flight to ``consumer_id`` back: delivered again after
        ``delay_ms`` (their key stays blocked meanwhile), or dead-lettered when they
        reached ``max_deliveries``. Returns how many were in flight to it."""
        _check_now(now_ms)
        if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or delay_ms < 0:
            raise ValueError(f"delay_ms must be an integer >= 0, got {delay_ms!r}")
        self._consumer(consumer_id)
        positions = decode_message_ids(list(ids))  # validate before any change
        self.expire(now_ms)
        held = self._held(consumer_id, positions)
        for msg in held:
            self._fail(msg, "nack", delay_ms, now_ms)
        return len(held)

    # ------------------------------------------------------------ dead letters
    def take_dead_letters(self) -> list[DeadLetter]:
        """Dead letters not handed out yet, oldest first. They stay outstanding in
        ``ack_state`` (so a crash redelivers them) until ``confirm_dead_letters``."""
        out = list(self._dead_untaken.values())
        self._dead_taken.update(self._dead_untaken)
        self._dead_untaken.clear()
        return out

    def confirm_dead_letters(self, ids: Iterable[str]) -> int:
        """The service has durably produced these dead letters to the DLQ: they are
        done for good. Returns how many were taken and not yet confirmed."""
        n = 0
        for pos in decode_message_ids(list(ids)):
            if self._dead_taken.pop(pos, None) is not None:
                self._tracker.done(*pos)
                n += 1
        return n

    # ------------------------------------------------------------- persistence
    def ack_state(self) -> dict[int, tuple[int, list[int]]]:
        """Per pp, ``(low_watermark, sorted done offsets >= it)``: every offset of this
        queue below the watermark is acked or dead-lettered (confirmed). Persist it
        (``metadata.acks``) so that a takeover (``restore``) redelivers exactly the
        messages not done. The watermark never goes backwards. See
        ``read_nodes.ack_tracker`` for its size and ``compact_ack_state``."""
        return self._tracker.pair_state()

    def compact_ack_state(self) -> dict[int, PartitionAckState]:
        """The same information bounded by the outstanding messages (see
        ``read_nodes.ack_tracker``); ``restore`` accepts either form."""
        return self._tracker.state()

    def low_watermark(self, pp: int) -> int:
        """Re-read ``pp`` from here after a restore: everything below is done."""
        return self._tracker.low_watermark(pp)

    def restore(self, states: Mapping[int, AckStateLike]) -> None:
        """Start from persisted ack states, per pp a ``(low_watermark, acked_above)``
        pair, an object with those attributes, or a ``PartitionAckState``; before any
        ingest. Records done there are skipped by ``ingest``; every other record is
        delivered again (delivery counts restart). ValueError when messages were
        already ingested or a state is malformed (nothing changes)."""
        if self._msgs or self._dead_untaken or self._dead_taken:
            raise ValueError("restore must happen before any ingest")
        self._tracker.restore(states)

    # ------------------------------------------------------------------- stats
    def lag(self) -> LagReport:
        """Messages ingested and not yet done, by lane, env and set of the message."""
        by_lane: dict[str, int] = {}
        by_env: dict[str, int] = {}
        by_set: dict[str, int] = {}
        for ctx, n in self._ctx_count.items():
            by_lane[ctx.lane] = by_lane.get(ctx.lane, 0) + n
            by_env[ctx.env] = by_env.get(ctx.env, 0) + n
            by_set[ctx.set] = by_set.get(ctx.set, 0) + n
        return LagReport(len(self._msgs), by_lane, by_env, by_set)

    def in_flight_by_context(self) -> dict[IsolationContext, int]:
        """Messages in flight per member context (kept incrementally for ``poll``)."""
        return {ctx: n for ctx, n in self._inflight_by_ctx.items() if n}

    def inflight_count(self, consumer_id: str) -> int:
        return len(self._consumer(consumer_id).inflight)

    def members(self) -> list[MemberInfo]:
        """The live consumers, by id."""
        return [
            MemberInfo(cid, c.ctx, tuple(sorted(c.vps)), len(c.inflight), c.last_seen)
            for cid, c in sorted(self._consumers.items())
        ]

    def stats(self) -> dict[str, int]:
        """Counters for metrics: outstanding, ready, timers (in flight + delayed),
        in_flight, keys (blocked-key chains), dead_letters (not yet confirmed)."""
        return {
            "outstanding": len(self._msgs),
            "ready": len(self._ready),
            "timers": len(self._timers),
            "in_flight": sum(len(c.inflight) for c in self._consumers.values()),
            "keys": len(self._chains),
            "dead_letters": len(self._dead_untaken) + len(self._dead_taken),
        }
