"""Acks and nacks of ``GroupDelivery`` (see ``read_nodes.delivery`` for the rules). A
base class of ``GroupDelivery``, sharing its state; split off so that each file has one
job.

An ack is the hot path of a consumer catching up (one call per poll, hundreds of
messages), so ``ack_positions`` finishes the acked messages in one pass and settles
the per-context counters once per call; it does what ``_finish`` does for each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from vpq.codec.message_id import decode_message_ids
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.delivery_items import INFLIGHT, Consumer, Msg, Pos, check_now


class DeliveryAcks:
    """Acks and nacks of one group."""

    def _held(self, consumer_id: str, positions: Iterable[Pos]) -> list[Msg]:
        out: list[Msg] = []
        seen: set[Pos] = set()
        for pos in positions:
            msg = self._msgs.get(pos)
            if msg is not None and msg.holder == consumer_id and msg.state == INFLIGHT and pos not in seen:
                seen.add(pos)
                out.append(msg)
        return out

    def ack(self, consumer_id: str, ids: Iterable[str]) -> int:
        """Acknowledge messages in flight to ``consumer_id``; returns how many were.
        Ids not in flight to this consumer (unknown, already acked, timed out, held
        by another, given back with an earlier message of their run) are ignored.
        MessageIdError (nothing changes) on a malformed id; UnknownConsumer when not
        a member."""
        return self.ack_ids(consumer_id, list(ids))

    def ack_ids(
        self, consumer_id: str, ids: list[str] | tuple[str, ...], note_done: Callable[[int, int], None] | None = None
    ) -> int:
        """``ack`` of a list of ids, with ``note_done`` as for ``ack_positions``. The ids
        a consumer sends back are the ones it was handed, so they are looked up as
        they are; only when one is not in flight to it (or not a string) is the whole
        list decoded and validated as ``ack_positions`` takes it (a malformed id then
        raises MessageIdError before anything changes)."""
        c = self._consumer(consumer_id)
        if not isinstance(ids, (list, tuple)):
            return self.ack_positions(consumer_id, decode_message_ids(ids), note_done)
        find = c.inflight.get
        try:
            found = list(map(find, ids))
        except TypeError:  # an unhashable id: decode_message_ids names it
            found = [None]
        if None in found:
            return self.ack_positions(consumer_id, decode_message_ids(ids), note_done)
        return self._ack_msgs(c, consumer_id, zip(ids, found), note_done)

    def ack_positions(
        self, consumer_id: str, positions: Iterable[Pos], note_done: Callable[[int, int], None] | None = None
    ) -> int:
        """``ack`` of already decoded ids; ``note_done(stream, offset)`` is told, per
        stream, the highest offset this call acked (``ack_persistence.AckSnapshots``)."""
        c = self._consumer(consumer_id)
        find = self._msgs.get
        return self._ack_msgs(c, consumer_id, [(None, find(pos)) for pos in positions], note_done)

    def _ack_msgs(
        self,
        c: Consumer,
        consumer_id: str,
        found: Iterable[tuple[str | None, Msg | None]],
        note_done: Callable[[int, int], None] | None,
    ) -> int:
        """Finish each message of ``found`` (``(its id or None, message or None)``) that is
        in flight to ``consumer_id`` as ``_finish`` does, counters settled once; others
        (None, repeats, not in flight to it) are ignored."""
        msgs = self._msgs
        inflight = c.inflight
        released = self._released if self._parked else None  # nothing parked: no key to refill
        unchain = self._unchain
        acked: dict[int, list[int]] = {}
        done_by_ctx: dict[IsolationContext, int] = {}
        last_ctx: IsolationContext | None = None
        n = left = last_n = 0
        for mid, msg in found:
            # a message listed twice is skipped the second time: it has no holder any more
            if msg is None or msg.holder != consumer_id or msg.state != INFLIGHT:
                continue
            n += 1
            timer = msg.timer
            if timer is not None:
                msg.timer = None
                timer.live -= 1
                if not timer.live:
                    timer.msgs = None
            msg.due = None
            msg.holder = None
            del msgs[msg.pos]
            e = msg
            if inflight.pop(mid if mid is not None else f"{e.pp}-{e.offset}", None) is not None:
                left += 1
            if e.ctx is last_ctx:  # counted per run of one context (no hashing per message)
                last_n += 1
            else:
                if last_n:
                    done_by_ctx[last_ctx] = done_by_ctx.get(last_ctx, 0) + last_n
                last_ctx, last_n = e.ctx, 1
            offsets = acked.get(e.stream)
            if offsets is None:
                acked[e.stream] = [e.offset]
            else:
                offsets.append(e.offset)
            if released is not None:
                released(msg)
            if msg.chain is not None:
                unchain(msg, msg.chain)
        if left:
            self._inflight_by_ctx[c.ctx] -= left
            self._inflight -= left
        if last_n:
            done_by_ctx[last_ctx] = done_by_ctx.get(last_ctx, 0) + last_n
        counts = self._ctx_count
        for ctx, k in done_by_ctx.items():
            rest = counts[ctx] - k
            if rest:
                counts[ctx] = rest
            else:
                del counts[ctx]
        for stream, offsets in acked.items():
            if note_done is not None:
                note_done(stream, max(offsets))
            self._tracker.done_many(stream, offsets)
        return n

    def nack(self, consumer_id: str, ids: Iterable[str], delay_ms: int, now_ms: int) -> int:
        """Give messages in flight to ``consumer_id`` back: delivered again after
        ``delay_ms`` (their key stays blocked meanwhile) with the later messages of
        their runs, or dead-lettered when they reached ``max_deliveries``. Returns
        how many were in flight to it."""
        check_now(now_ms)
        if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or delay_ms < 0:
            raise ValueError(f"delay_ms must be an integer >= 0, got {delay_ms!r}")
        self._consumer(consumer_id)
        positions = decode_message_ids(list(ids))  # validate before any change
        self.expire(now_ms)
        held = sorted(self._held(consumer_id, positions), key=lambda m: m.seq)
        nacked = {(m.pp, m.offset) for m in held}
        for msg in held:
            if msg.state == INFLIGHT and msg.holder == consumer_id:  # else given back (and delayed) with an earlier one
                self._fail(msg, "nack", delay_ms, now_ms, nacked)
        return len(held)
