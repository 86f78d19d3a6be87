"""Feeding one group's ``GroupDelivery`` from the node's queue indexes.

The group reads each *stream* (one isolation context of the queue in one
physical partition it lives or lived in: ``delivery_types.stream_of``) with its
own cursor: every record of the stream below the cursor has been handed to the
delivery state (``ingest``) or parked, and the delivery state has been told so
(``mark_scanned``). A step reads, per stream, only that context's offsets of
the queue from the tailer's ``QueueIndex`` (never a scan of the whole
partition), and for each record, in this order:

- lineage order (``read_nodes.lineage_order``): an earlier range of the record's
  vp is not finished in its pp's stream of the same context (HOLD), or the
  cached lineage does not know the record yet (UNKNOWN: the host reloads the
  lineage; a record still unknown after a reload and ``unknown_grace_ms`` is
  ingested anyway, with a warning, so a lineage that is wrong can delay a group
  but never stall it for ever): the stream stops there;
- a parked key (``read_nodes.parked_keys``): the record joins the key's open
  segment (or opens one here) and stays in the log; the cursor goes on;
- a record addressed to another group (``codec.system_headers.GROUP``, a dead-letter
  redrive's) is skipped: the cursor goes on, as past a record that vanished;
- ``GroupDelivery.admit``: ``NOBODY`` (no live consumer may take the context:
  the stream stops until one joins), ``PAUSE`` (enough is ready: the stream
  stops for now), ``PARK`` (the key's read-ahead is full: park it here),
  ``INGEST``.

So a context nobody consumes, or a key waiting behind an unacked run, never
holds back the other streams or keys: their records wait in the log and are
found again through the index. Parked keys are refilled, segment by segment,
when the delivery state says they have room (``refills``).

Delayed records (``deliver_at_ms`` later than the record's timestamp, stored as a
reserved header: ``codec.system_headers``) are not admitted where the cursor meets
them: they go to the delivery state's timer index (``GroupDelivery.defer``: due
time and position only) and the cursor moves on. Once due they are read again and
ingested (``drain_due``), so each joins its key by due time, as if it arrived
then: at the end of a step that is not cut short by its budget, and, while the
cursors read a backlog, before any record whose timestamp is at or after their
due time (so a re-read after a restart puts them where they were due). A due
record whose context no live consumer takes, or that finds ``max_unacked``
messages ready, waits in the index. A record's ``priority`` attribute goes to
the delivery state with it (``offer``, or the ``DeliveryEntry`` of a deferred one).

A step loops over the streams until none moves, because one stream's progress
can release another's held records. Records are taken from the record cache,
or read back from the write node (``RecordSource.get``); a record that no
longer exists there (retention, compaction) is skipped, and so is a record older
than ``expire_before`` (wall-clock ms, set by the host from the queue's
``retention_ms``): both count in ``expired`` unless the group had already done
them. Cursors below the log start jump to it (the records are gone).

The usual record (cached, no header but a lone dedup id, ingested by ``offer_routed``)
goes through all of this in C, many at a time (``read_nodes.bulk_offer``), to the same
effect. Parking, refills and the release of due records are
``read_nodes.ingestor_refills``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vpq.codec.system_headers import DEDUP, reader_attributes
from vpq.common.errors import VpqError
from vpq.read_nodes.bulk_offer import offer_cached
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import Admission, DeliveryEntry, stream_ctx_id, stream_of, stream_pp
from vpq.read_nodes.ingestor_refills import IngestorRefills
from vpq.read_nodes.lag_report import backlog, oldest_backlog
from vpq.read_nodes.lineage_order import Decision, LineageOrder
from vpq.read_nodes.parked_keys import ParkedKeys, ParkKey
from vpq.read_nodes.record_cache import RecordCache
from vpq.read_nodes.tailer import Listener
from vpq.read_nodes.tailer_pool import TailerPool

log = logging.getLogger(__name__)


@dataclass(slots=True)
class StepResult:
    ingested: int = 0
    moved: bool = False
    """some cursor advanced"""
    unknown: bool = False
    """a record outside the cached lineage is held: reload the lineage"""
    blocked: bool = False
    """a cursor waits for a tailer (re-reading) or the write node"""
    held: bool = False
    """a cursor stopped at a record held by lineage order or back-pressure"""
    more: bool = False
    """the step stopped at its budget with work left: step again (after yielding)"""
    nobody: bool = False
    """a stream waits for a consumer that may take its context"""
    deferred: int = 0
    """delayed records put in the timer index"""
    released: int = 0
    """delayed records that came due and were ingested"""


def wall_clock_ms() -> int:
    """Unix time in ms: the clock of record timestamps and ``deliver_at_ms``."""
    return time.time_ns() // 1_000_000


class Ingestor(IngestorRefills):
    """The cursors of one group (see the module docstring)."""

    def __init__(
        self,
        queue_id: int,
        delivery: GroupDelivery,
        pool: TailerPool,
        key: object,
        listener: Listener,
        *,
        batch: int = 512,
        unknown_grace_ms: int = 5000,
        group: str = "",
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        """``group``: the group's name (records addressed to another group are skipped);
        ``clock``: Unix ms, against which delayed records come due."""
        self.queue_id = queue_id
        self._group = group.encode("utf-8")
        self.delivery = delivery
        self._pool = pool
        self._key = key
        self._listener = listener
        self._batch = batch
        self._grace = unknown_grace_ms
        self.starts: dict[int, int] = {}
        """per pp: where the group starts reading it"""
        self.cursors: dict[int, int] = {}
        """per stream: everything of it below has been ingested or parked"""
        self.parked = ParkedKeys()
        self._seen_end: dict[int, int] = {}
        self._cold: frozenset[int] = frozenset()
        self._wanted: set[ParkKey] = set()
        self._order = LineageOrder({})
        self._lineage_ms = 0
        self._unknown_since: dict[tuple[int, int], int] = {}
        self._clock = clock
        self._skip_due: set[int] = set()
        """streams whose due records no live consumer takes (retried every step)"""
        self.expire_before: int | None = None
        """records with an older timestamp are never ingested (the queue's retention)"""
        self.expired = 0
        """records skipped as expired or vanished (the host takes and resets it)"""

    # ------------------------------------------------------------------- setup
    def set_lineage(self, order: LineageOrder, now_ms: int) -> None:
        self._order = order
        self._lineage_ms = now_ms

    @property
    def lineage(self) -> LineageOrder:
        return self._order

    def add_pp(self, pp: int, start: int) -> None:
        """Start reading ``pp`` from ``start`` (no-op when already read)."""
        if pp in self.starts:
            return
        self.starts[pp] = start
        self._pool.subscribe(pp, self._key, self._listener, start)

    async def close(self) -> None:
        set_cold = getattr(self._pool, "set_cold", None)
        if set_cold is not None:
            set_cold(self._key, self.queue_id, None)
        for pp in list(self.starts):
            await self._pool.unsubscribe(pp, self._key)

    def _report_cold(self, cold: set[int]) -> None:
        frozen = frozenset(cold)
        if frozen != self._cold:
            self._cold = frozen
            set_cold = getattr(self._pool, "set_cold", None)
            if set_cold is not None:
                set_cold(self._key, self.queue_id, frozen)

    def _streams(self, pp: int, index: object) -> list[int]:
        """The streams of ``pp`` with records of the queue. A stream first seen starts
        where the pp starts for the group (or its restored ack state resumes), and not
        below the index's start: the group's tailer position never passes
        ``_seen_end[pp]``, the index end when the contexts were last listed, so a
        context not listed yet has no record below what the index still holds."""
        seen = index.end_offset(pp)  # type: ignore[attr-defined]
        out = []
        for ctx_id in index.contexts(pp, self.queue_id):  # type: ignore[attr-defined]
            stream = stream_of(pp, ctx_id)
            if stream not in self.cursors:
                lw = self.delivery.low_watermark(stream)
                self.cursors[stream] = max(self.starts[pp], lw if lw else index.start_offset(pp))  # type: ignore[attr-defined]
            out.append(stream)
        self._seen_end[pp] = max(self._seen_end.get(pp, 0), seen)
        return out

    # -------------------------------------------------------------------- step
    async def step(self, now_ms: int, budget: int | None = None) -> StepResult:
        """Refill parked keys that have room, then advance the cursors (see the module
        docstring). With ``budget``, stop once at least that many records were
        ingested and return with ``more`` set, so the caller can answer waiting polls
        and other requests before the next step: one step over a big backlog would
        otherwise hold the event loop for the whole backlog."""
        result = StepResult()
        if self._cold:  # a context that has a consumer again is cached again from now on
            context = getattr(self._pool.source, "context", lambda _cid: None)
            still = set()
            for cid in self._cold:
                ctx = context(cid)
                if ctx is None or not self.delivery.routable(ctx):
                    still.add(cid)
            self._report_cold(still)
        self._skip_due.clear()
        self._wanted.update(self.delivery.refills())
        if self._wanted:
            await self._refill_all(result)
        progress = True
        cold: set[int] = set()
        while progress:
            progress = False
            for pp in sorted(self.starts):
                tailer = self._pool.get(pp)
                if tailer is None:
                    continue
                for stream in self._streams(pp, tailer.index):
                    if await self._scan(stream, tailer, now_ms, result, cold):
                        progress = True
                        result.moved = True
                        if budget is not None and result.ingested >= budget:
                            result.more = True
                            return result
        self._report_cold(cold)
        now = self._clock()
        due = self.delivery.next_delayed_ms(self._skip_due)
        if due is not None and due <= now:
            await self.drain_due(now, result)
        return result

    def _cursor_of(self, pp: int, ctx_id: int) -> int:
        """How far the group has read ``pp`` in context ``ctx_id`` (a stream without
        records yet: as far as the pp is indexed, if the group reads it)."""
        c = self.cursors.get(stream_of(pp, ctx_id))
        if c is not None:
            return c
        return max(self.starts.get(pp, 0), self._seen_end.get(pp, 0))

    async def _scan(self, stream: int, tailer: object, now_ms: int, result: StepResult, cold: set[int]) -> bool:
        pp = stream_pp(stream)
        ctx_id = stream_ctx_id(stream)
        start = c = self.cursors[stream]
        delivery = self.delivery
        if c < tailer.log_start:  # type: ignore[attr-defined]
            log.warning("queue %d pp %d: offsets %d..%d were removed by retention before delivery",
                        self.queue_id, pp, c, tailer.log_start)  # type: ignore[attr-defined]
            c = tailer.log_start  # type: ignore[attr-defined]
        if not tailer.covers(c):  # type: ignore[attr-defined]
            tailer.require(c)  # type: ignore[attr-defined]
            result.blocked = True
            return self._save(stream, tailer, start, c)
        index = tailer.index  # type: ignore[attr-defined]
        # the index end that goes with these entries: the tailer indexes more records
        # while this scan awaits a read (``_record``, ``drain_due``), and those are not
        # in ``entries``, so the cursor may pass only what was indexed when they were taken
        indexed_end = index.end_offset(pp)
        entries = index.entries_from(pp, self.queue_id, c, self._batch, ctx_id)
        v = delivery.virtual_partitions
        mask = v - 1
        order = self._order
        parked = self.parked
        stopped = False
        plain = order.is_empty()
        plain_vps = frozenset() if plain else order.plain_vps(pp, v, c)
        source_context = getattr(self._pool.source, "context", lambda _cid: None)
        source_cached = self._pool.source.cached
        cache = getattr(self._pool.source, "cache", None)
        cache_get = None if cache is None else cache.get  # source.cached(pp, offset), one call less
        ingested = 0
        wall = self._clock()
        next_due = delivery.next_delayed_ms(self._skip_due)
        offset = c
        offer = delivery.offer
        offer_routed = delivery.offer_routed
        cutoff = self.expire_before
        parked_keys = parked._keys  # noqa: SLF001 - same room; ``pk in parked`` without the call

        def cursor_of(p: int) -> int:  # for order.check: the record's own pp is read up to it
            return offset if p == pp else self._cursor_of(p, ctx_id)

        # routable: the stream's context was met and a live consumer takes it; only an
        # await below (other tasks: joins, leaves) can change that, so it is checked
        # again after one
        routable = False
        # the usual records go to the delivery state in bulk (``bulk_offer``), the rest
        # one by one below; the bulk path needs what it does not check per record
        bulk = offer_cached if isinstance(cache, RecordCache) else None
        bulk_vps = None if plain else plain_vps  # keys of other vps wait for lineage order: one by one
        cache_data = cache.data if bulk is not None else None  # type: ignore[union-attr]
        todo = iter(entries)
        while True:
            if bulk is not None and routable and next_due is None and not parked_keys:
                n, cur, item, usable = bulk(todo, pp, ctx_id, stream, cache_data, delivery, cutoff, mask, bulk_vps)
                if n:
                    ingested += n
                    cache.note_hits(n)  # type: ignore[union-attr]
                    c = cur
                if not usable:
                    bulk = None
            else:
                item = next(todo, None)
            if item is None:
                break
            offset, ref = item
            key_hash = ref & 0xFFFFFFFF
            if not (plain or key_hash & mask in plain_vps):
                decision = order.check(key_hash & mask, v, pp, offset, cursor_of)
                if decision is Decision.UNKNOWN and not self._unknown_expired(pp, offset, now_ms):
                    result.unknown = True
                    stopped = True
                    break
                if decision is Decision.HOLD:
                    result.held = True
                    stopped = True
                    break
            if parked_keys and (ctx_id, key_hash) in parked_keys:  # pk in parked
                pk = (ctx_id, key_hash)
                covered = parked.covers(pk, stream)
                if not covered and not delivery.is_done(stream, offset, key_hash):
                    self._park(pk, stream, offset)
                    c = offset + 1
                    continue
                if covered or not delivery.maybe_deferred(stream, offset):
                    c = offset + 1
                    continue
                # done by its offset, unless it is a delayed record still waiting: read it
            if not routable:
                known = source_context(ctx_id)
                if known is not None:
                    if not delivery.routable(known):  # decided before reading the record
                        result.nobody = True
                        cold.add(ctx_id)
                        stopped = True
                        break
                    routable = True
            pos = (pp, offset)
            tailed = cache_get(pos) if cache_get is not None else source_cached(pp, offset)
            if tailed is None:
                routable = False
                tailed = await self._record(pp, offset, result)
                if tailed is False:
                    stopped = True
                    break
                if tailed is None:
                    if not delivery.is_done(stream, offset, key_hash):
                        self.expired += 1
                    c = offset + 1
                    continue
            r = tailed
            deliver_at: int | None = None
            priority = 0
            headers = r.headers
            if headers and (len(headers) > 1 or headers[0][0] != DEDUP):  # a dedup id alone says nothing here
                deliver_at, priority, to_group = reader_attributes(headers)
                if to_group is not None and to_group != self._group:  # addressed to another group
                    c = offset + 1
                    continue
            ts = r.timestamp_ms
            if cutoff is not None and ts is not None and ts < cutoff:  # self._expired(ts)
                if not delivery.is_done(stream, offset, key_hash):
                    self.expired += 1
                c = offset + 1
                continue
            ts = ts or 0
            if deliver_at is not None and deliver_at > ts:
                entry = DeliveryEntry.trusted(pp, offset, key_hash, r.key, tailed.ctx, ts, ctx_id, priority)
                if delivery.defer(entry, deliver_at):
                    result.deferred += 1
                    self._uncache_if_far(pp, offset, deliver_at, wall)
                    if next_due is None or deliver_at < next_due:
                        next_due = deliver_at
                c = offset + 1
                continue
            if next_due is not None and next_due <= ts and next_due <= wall:
                # what came due before this record was written joins its key first
                await self.drain_due(min(ts, wall), result)
                routable = False
                next_due = delivery.next_delayed_ms(self._skip_due)
            # admit, then ingest when it says INGEST (True: ingested, False: skipped)
            if routable:  # checked above for the stream's context, no await since: not again
                verdict = offer_routed(pp, offset, pos, tailed.ctx, ctx_id, key_hash, r.key, ts, priority)
            else:
                verdict = offer(pp, offset, tailed.ctx, ctx_id, key_hash, r.key, ts, priority)
            if verdict is True:
                ingested += 1
            elif verdict is not False:
                if verdict == Admission.NOBODY:
                    result.nobody = True
                    cold.add(ctx_id)
                    stopped = True
                    break
                if verdict == Admission.PAUSE:
                    result.held = True
                    stopped = True
                    break
                if not delivery.is_done(stream, offset, key_hash):  # PARK
                    self._park((ctx_id, key_hash), stream, offset)
            c = offset + 1
        result.ingested += ingested
        if not stopped and len(entries) < self._batch:
            c = max(c, indexed_end)
        return self._save(stream, tailer, start, c)

    def _expired(self, timestamp_ms: int | None) -> bool:
        cutoff = self.expire_before
        return cutoff is not None and timestamp_ms is not None and timestamp_ms < cutoff

    async def _record(self, pp: int, offset: int, result: StepResult) -> Any:
        """The record at ``(pp, offset)``; None when it vanished (retention), False when
        it cannot be read now."""
        source = self._pool.source
        tailed = source.cached(pp, offset)
        if tailed is not None:
            return tailed
        try:
            tailed = await source.get(pp, offset)
        except VpqError as exc:
            log.info("queue %d pp %d: cannot read offset %d now: %s", self.queue_id, pp, offset, exc)
            result.blocked = True
            return False
        if tailed is None:
            log.debug("queue %d pp %d: record %d vanished before delivery (counted expired)", self.queue_id, pp, offset)
        return tailed

    def _save(self, stream: int, tailer: object, start: int, c: int) -> bool:
        if c <= start:
            return False
        self.cursors[stream] = c
        self.delivery.mark_scanned(stream, c)
        pp = stream_pp(stream)
        of_pp = {s: v for s, v in self.cursors.items() if stream_pp(s) == pp}
        if len(self.parked):  # a parked record is still to be read where its segment starts
            for s, v in of_pp.items():
                parked_low = self.parked.lowest(s)
                if parked_low is not None and parked_low < v:
                    of_pp[s] = parked_low
        low = min(of_pp.values())
        scanned_to = max(of_pp.values())  # the read-ahead position: what the group still reads from here
        low = min(low, self._seen_end.get(pp, low))
        tailer.set_position(self._key, low, scanned_to)  # type: ignore[attr-defined]
        return True

    def _unknown_expired(self, pp: int, offset: int, now_ms: int) -> bool:
        first = self._unknown_since.setdefault((pp, offset), now_ms)
        if now_ms - first >= self._grace and self._lineage_ms > first:
            log.warning("queue %d: record %d-%d lies outside its vp's lineage after a reload; delivering it anyway",
                        self.queue_id, pp, offset)
            del self._unknown_since[(pp, offset)]
            return True
        if len(self._unknown_since) > 1024:
            self._unknown_since.clear()
        return False

    # -------------------------------------------------------------------- lag
    def backlog(self, sample: int = 20_000) -> dict[tuple[int, int], int]:
        """Records not ingested yet by (context id, vp): ``lag_report.backlog``."""
        return backlog(self, sample)

    def oldest_backlog(self) -> list[tuple[int, int]]:
        """Per stream, the oldest record not ingested yet: ``lag_report.oldest_backlog``."""
        return oldest_backlog(self)
