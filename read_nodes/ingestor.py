"""Feeding one group's ``GroupDelivery`` from the node's queue indexes.

The group keeps one cursor per physical partition its queue lives (or lived) in:
every record of the queue below the cursor has been handed to the delivery state
(``ingest``) and the delivery state has been told so (``mark_scanned``). A step
reads, per pp, only the queue's own offsets from the tailer's ``QueueIndex``
(never a scan of the whole partition), and advances the cursor record by record
until it meets a record it must not take yet:

- lineage order (``read_nodes.lineage_order``): an earlier range of the record's
  vp is not finished (HOLD), or the cached lineage does not know the record yet
  (UNKNOWN: the host reloads the lineage; a record still unknown after a reload
  and ``unknown_grace_ms`` is ingested anyway, with a warning, so a lineage that
  is wrong can delay a group but never stall it for ever);
- back-pressure: ``GroupDelivery.can_ingest(pp, offset)`` is False.

The pp's cursor then stays at that record, and the next step retries it. A step
loops over the pps until none moves, because one pp's progress can release
another's held records.

Records are taken from the record cache, or read back from the write node
(``RecordSource.get``); a record that no longer exists there (retention) is
skipped. Cursors below the log start jump to it (the records are gone).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from common.errors import VpqError
from read_nodes.delivery import GroupDelivery
from read_nodes.delivery_types import DeliveryEntry
from read_nodes.lineage_order import Decision, LineageOrder
from read_nodes.tailer import Listener, unpack_ref
from read_nodes.tailer_pool import TailerPool

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


class Ingestor:
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
    ) -> None:
        self.queue_id = queue_id
        self.delivery = delivery
        self._pool = pool
        self._key = key
        self._listener = listener
        self._batch = batch
        self._grace = unknown_grace_ms
        self.cursors: dict[int, int] = {}
        self._order = LineageOrder({})
        self._lineage_ms = 0
        self._unknown_since: dict[tuple[int, int], int] = {}

    # ------------------------------------------------------------------- setup
    def set_lineage(self, order: LineageOrder, now_ms: int) -> None:
        self._order = order
        self._lineage_ms = now_ms

    @property
    def lineage(self) -> LineageOrder:
        return self._order

    def add_pp(self, pp: int, start: int) -> None:
        """Start reading ``pp`` from ``start`` (no-op when already read)."""
        if pp in self.cursors:
            return
        self.cursors[pp] = start
        self._pool.subscribe(pp, self._key, self._listener, start)

    async def close(self) -> None:
        for pp in list(self.cursors):
            await self._pool.unsubscribe(pp, self._key)

    # -------------------------------------------------------------------- step
    async def step(self, now_ms: int, budget: int | None = None) -> StepResult:
        """Advance the cursors (see the module docstring). With ``budget``, stop once at
        least that many records were ingested and return with ``more`` set, so the caller
        can answer waiting polls and other requests before the next step: one step over
        a big backlog would otherwise hold the event loop for the whole backlog."""
        result = StepResult()
        progress = True
        while progress:
            progress = False
            for pp in sorted(self.cursors):
                if await self._scan(pp, now_ms, result):
                    progress = True
                    result.moved = True
                    if budget is not None and result.ingested >= budget:
                        result.more = True
                        return result
        return result

    def _cursor_of(self, pp: int) -> int:
        return self.cursors.get(pp, 0)

    async def _scan(self, pp: int, now_ms: int, result: StepResult) -> bool:
        tailer = self._pool.get(pp)
        if tailer is None:
            return False
        start = c = self.cursors[pp]
        delivery = self.delivery
        if c < tailer.log_start:
            log.warning("queue %d pp %d: offsets %d..%d were removed by retention before delivery",
                        self.queue_id, pp, c, tailer.log_start)
            c = tailer.log_start
        if not tailer.covers(c):
            tailer.require(c)
            result.blocked = True
            return self._save(pp, tailer, start, c)
        index = tailer.index
        entries = index.entries_from(pp, self.queue_id, c, self._batch)
        v = delivery.virtual_partitions
        mask = v - 1
        order = self._order
        source = self._pool.source
        stopped = False
        for offset, ref in entries:
            _ctx_id, key_hash = unpack_ref(ref)
            decision = order.check(key_hash & mask, v, pp, offset, lambda p: offset if p == pp else self._cursor_of(p))
            if decision is Decision.UNKNOWN and not self._unknown_expired(pp, offset, now_ms):
                result.unknown = True
                stopped = True
                break
            if decision is Decision.HOLD or not delivery.can_ingest(pp, offset):
                result.held = True
                stopped = True
                break
            tailed = source.cached(pp, offset)
            if tailed is None:
                try:
                    tailed = await source.get(pp, offset)
                except VpqError as exc:
                    log.info("queue %d pp %d: cannot read offset %d now: %s", self.queue_id, pp, offset, exc)
                    result.blocked = True
                    stopped = True
                    break
            if tailed is not None:
                r = tailed.record
                entry = DeliveryEntry(pp, offset, key_hash, r.key, tailed.ctx, r.timestamp_ms or 0)
                if delivery.ingest(entry):
                    result.ingested += 1
            else:
                log.warning("queue %d pp %d: record %d vanished before delivery", self.queue_id, pp, offset)
            c = offset + 1
        if not stopped and len(entries) < self._batch:
            c = max(c, index.end_offset(pp))
        return self._save(pp, tailer, start, c)

    def _save(self, pp: int, tailer: object, start: int, c: int) -> bool:
        if c <= start:
            return False
        self.cursors[pp] = c
        self.delivery.mark_scanned(pp, c)
        tailer.set_position(self._key, c)  # type: ignore[attr-defined]
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
    def backlog(self, sample: int = 20_000) -> dict[int, int]:
        """Indexed records of the queue not ingested yet, by context id. Exact while a
        pp holds at most ``sample`` of them; beyond that the pp's (exact) count is split
        in the proportions of its oldest ``sample`` records (so the cost stays bounded)."""
        out: dict[int, int] = {}
        for pp, c in self.cursors.items():
            tailer = self._pool.get(pp)
            if tailer is None:
                continue
            total = tailer.index.count_from(pp, self.queue_id, c)
            if not total:
                continue
            seen: dict[int, int] = {}
            for _offset, ref in tailer.index.entries_from(pp, self.queue_id, c, min(total, sample)):
                cid = unpack_ref(ref)[0]
                seen[cid] = seen.get(cid, 0) + 1
            looked = sum(seen.values())
            if looked < total:
                scaled = {cid: n * total // looked for cid, n in seen.items()}
                scaled[max(seen, key=seen.__getitem__)] += total - sum(scaled.values())
                seen = scaled
            for cid, n in seen.items():
                out[cid] = out.get(cid, 0) + n
        return out
