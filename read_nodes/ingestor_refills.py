"""Parked keys refilled and delayed records released, for ``read_nodes.ingestor``.

A base class of ``Ingestor``, sharing its state (the rules are in the ingestor's
module docstring): ``_park`` leaves a key's records in the log, ``_refill_all``
hands parked records back while their key has room, ``drain_due`` ingests the
delayed records that came due.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vpq.codec.system_headers import addressed_elsewhere
from vpq.codec.system_headers import attributes as header_attributes
from vpq.read_nodes.delivery_types import DeliveryEntry, DeliveryFull, stream_ctx_id, stream_pp
from vpq.read_nodes.parked_keys import ParkKey

if TYPE_CHECKING:
    from vpq.read_nodes.ingestor import StepResult

UNCACHE_AFTER_MS = 30_000
"""a record deferred longer than this is dropped from the record cache (read again when due)"""


class IngestorRefills:
    """Parking, refills and due delayed records of one group's ``Ingestor``."""

    delivery: Any
    parked: Any
    cursors: dict[int, int]
    queue_id: int
    expired: int
    _pool: Any
    _wanted: set[ParkKey]
    _group: bytes
    _skip_due: set[int]
    _clock: Callable[[], int]

    def _park(self, pk: ParkKey, stream: int, offset: int) -> None:
        open_seg = self.parked.first(pk)
        close_at = None
        if open_seg is not None:
            last_stream = self._last_stream(pk)
            close_at = self.cursors.get(last_stream, 0) if last_stream is not None else None
        seg, closed = self.parked.add(pk, stream, offset, close_at)
        if closed is not None:
            self.delivery.park_progress(closed.stream, closed.id, until=closed.until)
        self.delivery.park_key(pk[0], pk[1], stream, seg.id, offset)

    def _last_stream(self, pk: ParkKey) -> int | None:
        segs = self.parked._keys.get(pk)  # noqa: SLF001 - same room
        return segs[-1].stream if segs else None

    # ------------------------------------------------------------------ refill
    async def _refill_all(self, result: StepResult) -> None:
        for pk in sorted(self._wanted):
            if pk not in self.parked:
                self._wanted.discard(pk)
                continue
            done = await self._refill(pk, result)
            if done:
                self._wanted.discard(pk)

    async def _refill(self, pk: ParkKey, result: StepResult) -> bool:
        """Hand parked records of ``pk`` back while it has room; True when there is
        nothing more to do for it now (unparked, or its read-ahead is full again)."""
        delivery = self.delivery
        ctx_id, key_hash = pk
        while True:
            room = delivery.key_room(ctx_id, key_hash)
            if room <= 0:  # its read-ahead is full (a later ack asks again), or all keys' is
                return not self._blocked_budget_full()
            seg = self.parked.first(pk)
            if seg is None:
                delivery.unpark_key(ctx_id, key_hash)
                return True
            pp = stream_pp(seg.stream)
            tailer = self._pool.get(pp)
            if tailer is None or not tailer.covers(seg.from_offset):
                if tailer is not None:
                    tailer.require(seg.from_offset)
                result.blocked = True
                return False
            limit = seg.until if seg.until is not None else self.cursors.get(seg.stream, seg.from_offset)
            taken = 0
            pos = seg.from_offset
            exhausted = False
            while taken < room:
                entries = tailer.index.entries_from(pp, self.queue_id, pos, 4096, ctx_id)
                entries = [(o, r) for o, r in entries if o < limit]
                if not entries:
                    exhausted = True
                    break
                for offset, ref in entries:
                    pos = offset + 1
                    if ref & 0xFFFFFFFF != key_hash:
                        continue
                    tailed = await self._record(pp, offset, result)
                    if tailed is False:
                        delivery.park_progress(seg.stream, seg.id, from_offset=offset)
                        seg.from_offset = offset
                        return False
                    if tailed is None or self._expired(tailed.timestamp_ms):
                        if not delivery.is_done(seg.stream, offset, key_hash):
                            self.expired += 1
                    elif not (tailed.headers and addressed_elsewhere(tailed.headers, self._group)):
                        r = tailed
                        ts = r.timestamp_ms or 0
                        attrs = header_attributes(r.headers)
                        entry = DeliveryEntry.trusted(
                            pp, offset, key_hash, r.key, tailed.ctx, ts, ctx_id, attrs.priority
                        )
                        try:
                            if attrs.deliver_at_ms is not None and attrs.deliver_at_ms > ts:
                                if delivery.defer(entry, attrs.deliver_at_ms):
                                    result.deferred += 1
                                    self._uncache_if_far(pp, offset, attrs.deliver_at_ms, self._clock())
                            elif delivery.ingest(entry):
                                result.ingested += 1
                        except DeliveryFull:
                            delivery.park_progress(seg.stream, seg.id, from_offset=offset)
                            seg.from_offset = offset
                            return False
                    taken += 1
                    if taken >= room:
                        break
            seg.from_offset = pos
            if exhausted:
                delivery.drop_segment(seg.stream, seg.id)
                if self.parked.pop_first(pk):
                    delivery.unpark_key(ctx_id, key_hash)
                    return True
                continue
            delivery.park_progress(seg.stream, seg.id, from_offset=pos)

    # ----------------------------------------------------------------- delays
    async def drain_due(self, until_ms: int, result: StepResult) -> None:
        """Ingest the delayed records due by ``until_ms``, earliest first, each read
        again from the record cache or the write node (see the module docstring)."""
        delivery = self.delivery
        skip = self._skip_due
        while True:
            due = delivery.take_due(until_ms, 256, skip)
            if not due:
                return
            for i, item in enumerate(due):
                _due_ms, stream, offset = item
                if stream in skip:
                    delivery.defer_again((item,))
                    continue
                pp = stream_pp(stream)
                tailed = await self._record(pp, offset, result)
                if tailed is False:
                    delivery.defer_again(due[i:])
                    return
                if tailed is None or self._expired(tailed.timestamp_ms):
                    delivery.drop_deferred(stream, offset)  # vanished, or past its queue's retention
                    self.expired += 1
                    continue
                r = tailed
                if not delivery.routable(tailed.ctx):
                    skip.add(stream)
                    result.nobody = True
                    delivery.defer_again((item,))
                    continue
                priority = header_attributes(r.headers).priority if r.headers else 0
                entry = DeliveryEntry.trusted(
                    pp, offset, r.key_hash, r.key, tailed.ctx, r.timestamp_ms or 0, stream_ctx_id(stream), priority
                )
                try:
                    if delivery.ingest(entry):
                        result.ingested += 1
                        result.released += 1
                except DeliveryFull:  # max_unacked messages are ready: the rest waits
                    result.held = True
                    delivery.defer_again(due[i:])
                    return

    def _uncache_if_far(self, pp: int, offset: int, due_ms: int, now_ms: int) -> None:
        """A record deferred for longer than ``UNCACHE_AFTER_MS`` leaves the record cache:
        it is read again when due, and a cache full of records waiting for hours would
        cost memory per pending message and push out records wanted now."""
        if due_ms - now_ms > UNCACHE_AFTER_MS:
            forget = getattr(self._pool.source, "forget", None)
            if forget is not None:
                forget(pp, offset)

    def _blocked_budget_full(self) -> bool:
        return self.delivery.stats()["blocked"] >= self.delivery.config.blocked_read_ahead
