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
  ``defer(entry, due_ms)``: a delayed record, held as (due time, position) only
  until it comes due; then the caller reads it again and ``ingest``s it, so it
  joins its key as if it arrived then (``read_nodes.delivery_delays``).
  ``mark_scanned(pp, offset)``: every record of the queue in ``pp`` below
  ``offset`` has been passed to ``ingest`` (call it only after ingesting).
  ``set_consumers`` / ``join`` / ``leave``: live consumers with their isolation
  context and the vps they own there (from the assignment).

Delivery rule (``poll``)
  A message is deliverable when it is not in flight, not delayed by a nack, and
  (``ordering == "key"``, keyed message) no message of its (key, isolation
  context) is in flight and every earlier one is acked or dead-lettered. A poll
  that takes such a message also takes the messages of the same key that follow
  it, in order, while they are deliverable too and the poll has room: a *run*
  (DESIGN.md guarantee 3). No message of the key goes to anyone while a message
  of the run is unacked and not dead-lettered. Acks may come in any order.
  Messages go to the consumer whose context is ``route(message context)`` over
  the contexts of the live consumers *now* (env strict; lane, then backbone;
  set, then default set) and who owns ``key_hash mod V`` there. Among the runs a
  poll may start, higher ``priority`` (the run's first message's, 0 to 9) comes
  first, then redeliveries before first deliveries, then ingestion order of the
  runs' first messages; priority never reorders a key (only a key's next
  message is ready at all).
  With ``steal_when_idle``, a consumer with nothing ready in its own vps takes
  what is ready in the others' (same routing): owned vps steer work, they never
  decide order, which the per-key rule alone keeps; and when work is scarce
  (every member of the context already holds a message, and fewer runs are ready
  than a full poll for each) a poll takes only its fair share,
  ``ceil(ready / members)``, so the end of a backlog is spread over the members.
  Each delivery increments ``delivery_count`` and sets a visibility deadline
  ``now_ms + visibility_timeout_ms``.

Failure paths
  A delivery not acked by its deadline (``expire``), nacked (``nack``, optional
  delay) or held by a consumer that leaves (``leave``, ``set_consumers``) is
  delivered again, together with the later messages of its run that are not
  acked yet (they go back in order, ahead of anything newer of the key; being
  withdrawn, not failed, that delivery does not count for them), to
  whoever owns it then; unless the failed message has been delivered
  ``max_deliveries`` times: then it is dead-lettered, which counts as done for
  ordering at once and for ``ack_state`` once the service, having produced it to
  the DLQ (``take_dead_letters``), calls ``confirm_dead_letters``.

Time: every method given ``now_ms`` first applies the timeouts due by then
(``expire``); ``ack`` only accepts a message still in flight to that consumer.

Memory: ``admit`` tells the reader, record by record, whether to ingest, to
stop a stream (``PAUSE``: ``max_unacked`` messages are ready for live
consumers; ``NOBODY``: no live consumer may take the record's context) or to
park the record's key (``PARK``: it already holds ``key_read_ahead`` messages,
or it waits behind a run in flight and ``blocked_read_ahead`` messages in all
already do). Undeliverable messages therefore wait in the log, not here.
``park_key`` / ``refills`` / ``unpark_key`` keep the parked keys, so the reader
hands their records back once the key has room again.

Cost: ``poll`` is ``O(b + k log b)`` for ``k`` runs started from ``b``
non-empty (message context, vp) buckets the consumer sees, plus the messages
taken; ``ack``/``nack``/``ingest`` are ``O(log n)`` per message.

Acks and nacks are ``read_nodes.delivery_acks``; membership is
``read_nodes.delivery_membership``; dead letters, persistence
(``ack_state``, ``restore``) and statistics are ``read_nodes.delivery_reports``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from vpq.codec.message_id import encode_message_id
from vpq.codec.system_headers import MAX_PRIORITY
from vpq.isolation.context import IsolationContext
from vpq.isolation.routing import Router
from vpq.read_nodes.ack_tracker import AckTracker
from vpq.read_nodes.bulk_deliver import deliver_many
from vpq.read_nodes.delay_index import DelayIndex
from vpq.read_nodes.delivery_acks import DeliveryAcks
from vpq.read_nodes.delivery_delays import DeliveryDelays
from vpq.read_nodes.delivery_items import (
    DELAYED,
    INFLIGHT,
    READY,
    WAITING,
    Chain,
    ChainKey,
    Consumer,
    Msg,
    ParkKey,
    Pos,
    Timer,
    check_now,
)
from vpq.read_nodes.delivery_membership import DeliveryMembership
from vpq.read_nodes.delivery_offer import DeliveryOffer
from vpq.read_nodes.delivery_parking import DeliveryParking
from vpq.read_nodes.delivery_reports import DeliveryReports
from vpq.read_nodes.delivery_types import (
    Admission,
    DeadLetter,
    Delivery,
    DeliveryConfig,
    DeliveryEntry,
    DeliveryFull,
)
from vpq.read_nodes.ready_buckets import FIRST_DELIVERY, REDELIVERY, ReadyBuckets
from vpq.read_nodes.routing_table import RouterFactory, RoutingTable

_new_delivery = tuple.__new__


class GroupDelivery(DeliveryAcks, DeliveryOffer, DeliveryMembership, DeliveryParking, DeliveryDelays, DeliveryReports):
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
        self._consumers: dict[str, Consumer] = {}
        self._msgs: dict[Pos, Msg] = {}
        self._chains: dict[ChainKey, Chain] = {}
        self._ready: ReadyBuckets[IsolationContext, Msg] = ReadyBuckets()
        self._timers: list[tuple[int, int, Timer]] = []  # heap of (due_ms, seq, timer): in flight and delayed
        self._timer_seq = 0
        self._ctx_count: dict[IsolationContext, int] = {}
        self._tracker = AckTracker(pair_form=config.max_acked_above is not None)
        self._dead_untaken: dict[Pos, DeadLetter] = {}
        self._dead_taken: dict[Pos, DeadLetter] = {}
        self._seq = 0
        self._members_by_ctx: dict[IsolationContext, int] = {}
        self._inflight_by_ctx: dict[IsolationContext, int] = {}
        self._inflight = 0
        self._blocked = 0  # messages held behind a run in flight (sum of Chain.counted)
        self._unroutable: frozenset[IsolationContext] = frozenset()
        self._unroutable_held = 0  # messages held of contexts no live consumer takes (not in flight)
        self._parked: dict[ParkKey, int] = {}  # parked key -> messages of it held here
        self._refills: set[ParkKey] = set()
        self._delays = DelayIndex()  # deferred records: (due, position) only (delivery_delays)

    # ------------------------------------------------------------------ config
    @property
    def config(self) -> DeliveryConfig:
        return self._config

    @property
    def virtual_partitions(self) -> int:
        return self._v

    # -------------------------------------------------------------- ingestion
    def outstanding(self) -> int:
        """Ingested messages not yet done, plus dead letters not yet confirmed."""
        return len(self._msgs) + len(self._dead_untaken) + len(self._dead_taken)

    def ready_held(self) -> int:
        """Messages held that a live consumer could take now or soon: neither in
        flight, nor behind a run in flight, nor of a context nobody takes."""
        return len(self._msgs) - self._inflight - self._blocked - self._unroutable_held

    def can_ingest(self, pp: int | None = None, offset: int | None = None) -> bool:
        """False when ``max_unacked`` messages are ready (``ready_held``), or (given
        ``pp``, a stream, with ``max_acked_above`` set: the pair form) when its ack
        window (outstanding + done offsets above its low watermark) reached
        ``max_acked_above``; a record pending from a ``restore`` or filling a hole
        below the highest done offset is then always accepted, so a takeover can make
        progress."""
        tracker = self._tracker
        cap = self._config.max_acked_above
        if cap is not None and pp is not None and offset is not None and (
            tracker.is_tracked(pp, offset) or tracker.is_hole(pp, offset)
        ):
            return True
        if self.ready_held() >= self._config.max_unacked:
            return False
        return pp is None or cap is None or tracker.window(pp) < cap

    def stream_at(self, pp: int, offset: int) -> int | None:
        """The stream of the message held at ``(pp, offset)`` (None when not held)."""
        msg = self._msgs.get((pp, offset))
        return None if msg is None else msg.stream

    def is_done(self, stream: int, offset: int, key_hash: int | None = None) -> bool:
        """True when the record at ``offset`` of ``stream`` is acked or dead-lettered."""
        return self._tracker.is_done(stream, offset, key_hash)

    def routable(self, ctx: IsolationContext) -> bool:
        """True when some live consumer may take messages of ``ctx`` now."""
        return self._routes.route_of(ctx) is not None

    def admit(self, stream: int, offset: int, ctx: IsolationContext, ctx_id: int, key_hash: int,
              key: bytes | None) -> str:
        """What the reader should do with the next record of ``stream`` (an
        ``Admission``; see the module docstring); ``key`` None for a keyless record."""
        if (ctx_id, key_hash) in self._parked and self._key_order:
            return Admission.PARK
        if self._routes.route_of(ctx) is None:
            return Admission.NOBODY
        cfg = self._config
        if self._key_order and key is not None:
            chain = self._chains.get((key, ctx))
            if chain is not None:
                if len(chain.pending) >= cfg.key_read_ahead:
                    return Admission.PARK
                if chain.run and self._blocked >= cfg.blocked_read_ahead:
                    return Admission.PARK
                if chain.run:
                    return Admission.INGEST
        if not self.can_ingest(stream, offset):
            return Admission.PAUSE
        return Admission.INGEST

    def ingest(self, entry: DeliveryEntry, admitted: bool = False) -> bool:
        """Add a record; False when it is already known or already done (skipped).

        DeliveryFull when ``can_ingest(entry.stream, entry.offset)`` is False and the
        record's key has no run out (a key waiting for an ack takes its read-ahead);
        ``admitted``: ``admit`` just said INGEST for it (not checked again).
        """
        pos = (entry.pp, entry.offset)
        if pos in self._msgs or pos in self._dead_untaken or pos in self._dead_taken:
            return False
        tracker = self._tracker
        stream = entry.stream
        chain_key = (entry.key, entry.ctx) if self._key_order and entry.key is not None else None
        chain = self._chains.get(chain_key) if chain_key is not None else None
        if not admitted:
            if tracker.is_done(stream, entry.offset, entry.key_hash):
                return False
            if (chain is None or not chain.run) and not self.can_ingest(stream, entry.offset):
                raise DeliveryFull(
                    f"cannot ingest stream {stream}: {self.ready_held()} messages ready (max_unacked "
                    f"{self._config.max_unacked}), ack window {tracker.window(stream)} (max_acked_above "
                    f"{self._config.max_acked_above})"
                )
        if not tracker.track_new(stream, entry.offset, entry.key_hash):
            return False
        self._add(
            entry.pp, entry.offset, entry.key_hash, entry.key, entry.ctx, entry.timestamp_ms, entry.ctx_id,
            entry.priority, pos, chain_key, chain,
        )
        return True

    def _add(
        self, pp: int, offset: int, key_hash: int, key: bytes | None, ctx: IsolationContext, timestamp_ms: int,
        ctx_id: int, priority: int, pos: Pos, chain_key: ChainKey | None, chain: Chain | None,
    ) -> None:
        """Hold the record at ``pos`` (``(pp, offset)``; the other arguments as
        ``DeliveryEntry`` names them), tracked already; ``chain`` is its key's, when
        there is one yet (``chain_key`` None: no key order for it)."""
        if chain_key is not None and chain is None:
            chain = self._chains[chain_key] = Chain(chain_key, (ctx_id, key_hash))
        seq = self._seq
        msg = Msg(seq, pp, offset, key_hash, key, ctx, timestamp_ms, ctx_id, priority, pos, chain)
        self._seq = seq + 1
        self._msgs[pos] = msg
        counts = self._ctx_count
        n = counts.get(ctx)
        counts[ctx] = 1 if n is None else n + 1
        if n is None:
            self._routes.add(ctx)
            if self._routes.route_of(ctx) is None:
                self._unroutable = self._unroutable | {ctx}
        if self._unroutable and ctx in self._unroutable:
            self._unroutable_held += 1
        if self._parked:
            parked = (ctx_id, key_hash)
            if parked in self._parked:
                self._parked[parked] += 1
        if chain is None:
            self._make_ready(msg)
            return
        pending = chain.pending
        pending.append(msg)
        if chain.run:  # then _recount: all of pending counts as blocked while a run is out
            self._blocked += len(pending) - chain.counted
            chain.counted = len(pending)
            return
        if len(pending) == 1:
            self._make_ready(msg)
        if chain.counted:  # pragma: no cover - _recount keeps it 0 while no run is out
            self._blocked -= chain.counted
            chain.counted = 0

    def mark_scanned(self, pp: int, offset: int) -> None:
        """Every record of the queue in stream ``pp`` below ``offset`` has been passed
        to ``ingest`` (ingested or skipped) or parked. Advances the persisted state;
        never call it ahead of ingestion, or the records in between count as done."""
        self._tracker.mark_scanned(pp, offset)

    # ---------------------------------------------------------------- delivery
    def _recount(self, chain: Chain) -> None:
        counted = len(chain.pending) if chain.run else 0
        self._blocked += counted - chain.counted
        chain.counted = counted

    def _make_ready(self, msg: Msg) -> None:
        msg.state = READY
        e = msg
        # higher message priority first; within one priority, redeliveries first
        prio = ((MAX_PRIORITY - e.priority) << 1) | (REDELIVERY if msg.count else FIRST_DELIVERY)
        self._ready.push(e.ctx, e.key_hash & self._mask, prio, msg.seq, msg)

    def _kick(self, chain: Chain) -> None:
        """Make the chain's next message ready when the key has no run out."""
        if not chain.run and chain.pending:
            head = chain.pending[0]
            if head.state == WAITING:
                self._make_ready(head)

    def poll(self, consumer_id: str, max_messages: int, now_ms: int) -> list[Delivery]:
        """Up to ``max_messages`` messages for ``consumer_id`` (its heartbeat too)."""
        check_now(now_ms)
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
        taken = self._ready.take(sources, c.vps, max_messages, self._run_length) if c.vps else []
        if not taken and steal:
            taken = self._ready.take(sources, None, max_messages, self._run_length)
        deadline = now_ms + self._config.visibility_timeout_ms
        delivered: list[Msg] = []
        add = delivered.append
        room = max_messages
        for head in taken:
            chain = head.chain
            if chain is None:
                add(head)
                room -= 1
                continue
            pending = chain.pending
            run = chain.run
            while room > 0 and pending and (pending[0] is head or pending[0].state == WAITING):
                msg = pending.popleft()
                run[msg] = None
                add(msg)
                room -= 1
            self._recount(chain)
        if deliver_many is not None and delivered and not self._unroutable:  # in one C call
            timer = Timer(deadline, delivered)
            out = deliver_many(delivered, consumer_id, c.inflight, deadline, self._mask, timer)
            self._push_timer(timer)
        else:
            out = self._deliver(delivered, consumer_id, c, deadline)
            if out:
                self._add_timer(deadline, delivered)
        if out:
            self._inflight_by_ctx[c.ctx] = self._inflight_by_ctx.get(c.ctx, 0) + len(out)
            self._inflight += len(out)
        return out

    def _add_timer(self, due: int, msgs: list[Msg]) -> None:
        timer = Timer(due, msgs)
        for msg in msgs:
            msg.timer = timer
        self._push_timer(timer)

    def _push_timer(self, timer: Timer) -> None:
        self._timer_seq += 1
        heapq.heappush(self._timers, (timer.due, self._timer_seq, timer))

    def _run_length(self, head: Msg, room: int) -> int:
        """How many messages a poll with ``room`` left takes when it takes ``head``."""
        chain = head.chain
        if chain is None or room <= 1:
            return 1
        n = 0
        for msg in chain.pending:
            if n >= room or (msg is not head and msg.state != WAITING):
                break
            n += 1
        return max(n, 1)

    def _deliver(self, msgs: list[Msg], consumer_id: str, c: Consumer, deadline: int) -> list[Delivery]:
        """Hand ``msgs`` (taken off their keys' pending lists) to ``c``, in order."""
        out: list[Delivery] = []
        append = out.append
        inflight = c.inflight
        unroutable = self._unroutable
        mask = self._mask
        for msg in msgs:
            e = msg
            msg.state = INFLIGHT
            msg.holder = consumer_id
            count = msg.count = msg.count + 1
            msg.due = deadline
            mid = f"{e.pp}-{e.offset}"  # encode_message_id
            inflight[mid] = msg
            if unroutable and e.ctx in unroutable:
                self._unroutable_held -= 1
            append(
                _new_delivery(Delivery, (  # Delivery(...) without the named tuple's Python-level __new__
                    mid, e.pp, e.offset, e.key_hash & mask, e.key, e.ctx, e.timestamp_ms, count, deadline,
                ))
            )
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

    def _clear_timer(self, msg: Msg) -> None:
        timer = msg.timer
        if timer is not None:
            msg.timer = None
            timer.live -= 1
            if not timer.live:
                timer.msgs = None
        msg.due = None
        if msg.holder is not None:
            holder = self._consumers[msg.holder]
            if holder.inflight.pop(f"{msg.pp}-{msg.offset}", None) is not None:
                self._inflight_by_ctx[holder.ctx] -= 1
                self._inflight -= 1
            msg.holder = None

    def _finish(self, msg: Msg, dead: DeadLetter | None, acked: dict[int, list[int]] | None = None) -> None:
        """Acked (``dead`` None) or dead-lettered: done for delivery and order. Only
        for a message in flight (or, dead, one just failed out of a run). With
        ``acked``, an ack's offset is collected there per stream for the caller to
        hand to the tracker at once."""
        was_inflight = msg.state == INFLIGHT
        self._clear_timer(msg)
        e = msg
        pos = (e.pp, e.offset)
        del self._msgs[pos]
        n = self._ctx_count[e.ctx] - 1
        if n:
            self._ctx_count[e.ctx] = n
        else:
            del self._ctx_count[e.ctx]
        if not was_inflight and e.ctx in self._unroutable:
            self._unroutable_held -= 1
        if dead is not None:
            self._dead_untaken[pos] = dead
        elif acked is not None:
            acked.setdefault(e.stream, []).append(e.offset)
        else:
            self._tracker.done(e.stream, e.offset)
        self._released(msg)
        if msg.chain is not None:
            self._unchain(msg, msg.chain)

    def _unchain(self, msg: Msg, chain: Chain) -> None:
        """``msg`` (done) leaves its key's run or, a failed run's head, its pending list;
        the key's next message becomes ready when nothing of it is out any more."""
        run = chain.run
        if msg in run:
            del run[msg]
            if run:  # the run goes on: nothing of the key can become ready, the chain stays
                self._recount(chain)
                return
        elif chain.pending and chain.pending[0] is msg:  # pragma: no branch - a failed run's head
            chain.pending.popleft()
        else:  # pragma: no cover - invariant: only a run's messages or a key's head finish
            e = msg
            raise AssertionError(f"message {(e.pp, e.offset)} finished while neither in its key's run nor its head")
        self._kick(chain)
        if not chain.run and not chain.pending:
            del self._chains[chain.key]
        else:
            self._recount(chain)

    def _fail(self, msg: Msg, reason: str, delay_ms: int, now_ms: int, delayed: set[Pos] | None = None) -> None:
        """An in-flight delivery was not acked: deliver it again, with the later
        messages of its run (back in order, ahead of anything newer of the key); or
        dead-letter it when it reached ``max_deliveries``. Later messages of the run
        listed in ``delayed`` (nacked in the same call) wait ``delay_ms`` too."""
        chain = msg.chain
        if chain is not None:
            run = list(chain.run)
            back = run[run.index(msg):]
            for m in back:
                del chain.run[m]
            for m in back:
                self._clear_timer(m)
                m.state = WAITING
                if m is not msg:
                    m.count -= 1  # withdrawn, not failed: that delivery does not count
                    if delayed and delay_ms > 0 and (m.pp, m.offset) in delayed:
                        self._delay(m, now_ms + delay_ms)
                if m.ctx in self._unroutable:
                    self._unroutable_held += 1
            chain.pending.extendleft(reversed(back))
        else:
            self._clear_timer(msg)
            msg.state = WAITING
            if msg.ctx in self._unroutable:
                self._unroutable_held += 1
        if msg.count >= self._config.max_deliveries:
            e = msg.entry  # a DeliveryEntry for the dead letter
            self._finish(msg, DeadLetter(encode_message_id(e.pp, e.offset), e, msg.count, reason))
            return
        if delay_ms > 0:
            self._delay(msg, now_ms + delay_ms)
        if chain is None:
            if delay_ms <= 0:
                self._make_ready(msg)
        else:
            self._kick(chain)
            self._recount(chain)

    def _delay(self, msg: Msg, due: int) -> None:
        msg.state = DELAYED
        msg.due = due
        self._add_timer(due, [msg])

    def expire(self, now_ms: int) -> int:
        """Apply timeouts due at ``now_ms``: deliveries past their visibility deadline
        are redelivered (or dead-lettered), nack delays that elapsed end. Returns how
        many messages changed state."""
        check_now(now_ms)
        timers = self._timers
        n = 0
        while timers and timers[0][0] <= now_ms:
            _, _, timer = heapq.heappop(timers)
            for msg in timer.msgs or ():
                if msg.timer is not timer:
                    continue  # acked, failed or given back since
                if msg.state == DELAYED:
                    self._clear_timer(msg)
                    msg.state = WAITING
                    if msg.chain is None:
                        self._make_ready(msg)
                    else:
                        self._kick(msg.chain)
                else:
                    self._fail(msg, "timeout", 0, now_ms)
                n += 1
        return n

    def next_due_ms(self) -> int | None:
        """The earliest pending visibility deadline or nack delay end, if any (it may
        turn out to have nothing left to do)."""
        timers = self._timers
        while timers and not timers[0][2].msgs:
            heapq.heappop(timers)
        return timers[0][0] if timers else None
