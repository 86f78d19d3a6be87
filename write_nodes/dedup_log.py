"""Deduplicated appends and the rebuild of a partition's dedup index from its log.

``admit(log, index, batch, view, now_ms, window_of)`` is the write node's append of one
checked magic-2 batch when some of its queues deduplicate (``write_nodes.dedup``): it
plans, submits only the records not stored yet (a new batch of them, timestamps kept,
when some are duplicates), indexes them, and returns without yielding an awaitable of:

- ``(base_offset, last_offset)`` when nothing was a duplicate (the plain answer);
- ``append_frames.Deduplicated(offsets, vps)`` otherwise: every record's coordinates,
  a duplicate's being those of its stored copy. It resolves once the new records AND
  every stored copy answered are durable (a copy still in the group commit is waited
  for); ``PartitionOfflineError`` if the log goes offline first, ``Unavailable``
  (``partition_offline``, retryable) if that takes longer than ``durable_wait_s``.

``rebuild(log, index, now_ms, scan_ms, window_of, max_records)`` indexes the dedup ids of
the durable records whose batch is at most ``scan_ms`` old (``offset_for_timestamp``), and
of no more than the last ``max_records`` offsets (an index bounded to N ids cannot hold
older ones once every record carries an id; the bound keeps a partition's opening short
at high rates), reading 1 MiB at a time and yielding to the event loop between reads;
data deleted meanwhile by retention is skipped. Magic-1 batches carry no dedup ids and
are skipped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from vpq.codec.columnar import MAGIC_COLUMNAR, build_columnar_batch, columns_of, decode, scan
from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import BatchView, iter_batches
from vpq.common.errors import Unavailable
from vpq.node_rpc.append_frames import Deduplicated
from vpq.write_nodes.dedup import DedupIndex, DedupPlan, WindowOf, dedup_ids, resolve, routes
from vpq.write_nodes.errors import OffsetOutOfRangeError, PartitionOfflineError
from vpq.write_nodes.log import PartitionLog

REBUILD_READ_BYTES = 1 << 20
DURABLE_WAIT_S = 30.0


def admit(
    log: PartitionLog,
    index: DedupIndex,
    batch: bytes,
    view: BatchView,
    now_ms: int,
    window_of: WindowOf,
    durable_wait_s: float = DURABLE_WAIT_S,
) -> Awaitable[tuple[int, int] | Deduplicated]:
    """See the module docstring. Raises what ``PartitionLog.submit_checked`` raises."""
    ids = dedup_ids(view)
    if ids is None:
        return log.submit_checked(batch, view)
    qids, vps = routes(view)
    plan = index.plan(qids, ids, now_ms, window_of)
    base = log.end_offset
    if not plan.has_duplicates:
        done = log.submit_checked(batch, view)
        index.register(plan, qids, vps, ids, base, now_ms, window_of)
        return done
    stored_now = None
    if plan.keep:
        kept = _subset(view, plan)
        stored_now = log.submit_checked(kept, BatchView(kept))
        index.register(plan, qids, vps, ids, base, now_ms, window_of)
    offsets, out_vps = resolve(plan, base, vps)
    wait_for = max((o for o, _ in plan.stored.values()), default=-1)
    return _answer(log, stored_now, wait_for, Deduplicated(offsets, out_vps), durable_wait_s)


def _subset(view: BatchView, plan: DedupPlan) -> bytes:
    """A batch of the kept records of ``view``, each with its own timestamp."""
    records = decode(view)
    kept = [records[i] for i in plan.keep]
    ts = view.first_ts
    return build_columnar_batch(0, ts, columns_of(kept, ts))


async def _answer(
    log: PartitionLog,
    stored_now: Awaitable[tuple[int, int]] | None,
    wait_for: int,
    answer: Deduplicated,
    durable_wait_s: float,
) -> Deduplicated:
    if stored_now is not None:
        await stored_now
    if wait_for >= 0 and log.durable_end_offset <= wait_for:
        if not await log.wait_for(wait_for, durable_wait_s):
            if not log.online:
                raise PartitionOfflineError(
                    f"partition {log.partition_id} went offline before offset {wait_for} was durable", log.partition_id
                )
            raise Unavailable(
                "partition_offline",
                f"partition {log.partition_id}: offset {wait_for} not durable after {durable_wait_s}s",
                partition=log.partition_id,
                retry_after=1.0,
            )
    return answer


async def rebuild(
    log: PartitionLog,
    index: DedupIndex,
    now_ms: int,
    scan_ms: int,
    window_of: WindowOf,
    max_records: int | None = None,
    load_queues: Callable[[set[int]], Awaitable[None]] | None = None,
) -> int:
    """Index the recent dedup ids of ``log`` (see the module docstring), reading at most
    the last ``max_records`` offsets; returns how many records were read.
    ``load_queues(ids)``, when given, is awaited before a batch with queue ids not met
    yet is indexed, so that ``window_of`` knows them (a node holds only the queues it
    has used)."""
    if scan_ms <= 0:
        return 0
    pos = log.offset_for_timestamp(now_ms - scan_ms)
    if pos is None:
        return 0
    if max_records is not None:
        pos = max(pos, log.durable_end_offset - max_records)
    seen = 0
    met: set[int] = set()
    while pos < log.durable_end_offset:
        try:
            data = log.read(pos, REBUILD_READ_BYTES)
        except OffsetOutOfRangeError:
            pos = max(pos, log.start_offset)
            if pos >= log.durable_end_offset:
                break
            continue
        if not data:
            break
        for view in iter_batches(data):
            if view.next_offset <= pos:
                continue
            seen += view.record_count
            if view.magic == MAGIC_COLUMNAR:
                if load_queues is not None:
                    try:
                        new = set(routes(view)[0]) - met
                    except CorruptBatchError:
                        new = set()
                    if new:
                        met |= new
                        await load_queues(new)
                _index_batch(index, view, pos, window_of)
            pos = view.next_offset
        await asyncio.sleep(0)
    return seen


def _index_batch(index: DedupIndex, view: BatchView, from_offset: int, window_of: WindowOf) -> None:
    try:
        scan(view)  # the log's batches passed recovery; a damaged one is skipped, not indexed
        ids = dedup_ids(view)
    except CorruptBatchError:
        return
    if ids is None:
        return
    qids, vps = routes(view)
    base = view.base_offset
    stamp = view.max_ts
    for i, dedup_id in enumerate(ids):
        if dedup_id is not None and base + i >= from_offset:
            index.add_stored(qids[i], dedup_id, base + i, vps[i], stamp, window_of(qids[i]))
