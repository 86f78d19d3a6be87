"""Tailing one physical partition for every group hosted on this read node.

``PartitionTailer`` long-polls ``GET /internal/v1/partitions/{pp}/read`` on the
write node owning the pp (``PartitionReader``: ``node_rpc.write_node_client.WriteNodeClient``
fits), verifies and decodes each batch ONCE, and for every record:

- puts the decoded record in the node's shared ``RecordCache`` under ``(pp, offset)``;
- adds it to its ``QueueIndex`` under the record's queue id, with
  ``ref = pack_ref(context_id, key_hash)`` (so lag by context and a record's vp
  are known from the index alone);

then calls every listener (the hosted groups that read this pp), which wake
their ingestion. Groups read only their queue's offsets from the index.

Read-ahead: a read that starts more than ``read_ahead_bytes`` past the most
advanced reader (``read_nodes.read_ahead``; readers report how far they scanned
with ``set_position(..., scanned_to=)``) is verified and indexed, but its records
are neither decoded nor cached: a reader that comes to them reads them back
(``RecordSource.get``, one read per ``fetch_max_bytes``). So a backlog larger than
the cache is decoded once, when it is wanted, not cached and evicted before use.
The index, and so the lag, still covers everything read. ``read_ahead_bytes`` 0:
everything read is decoded and cached.

Positions: the index covers ``[index.start_offset(pp), index.end_offset(pp))``.
A group that needs an earlier position calls ``require(offset)``: the tailer
drops its index and re-reads from there (the record cache stays). Readers report
their cursors with ``set_position``; from time to time the index drops the
entries more than ``keep_offsets`` below the lowest one. ``log_start`` is the write node's log start (records
below it were removed by retention and are gone). Offsets may have gaps (compaction
removed the records of deleted and expired queues): a read answers from the next
surviving offset, and an empty answer below the durable end means nothing survives
up to it, so the tailer moves there.

Errors from the write node (``not_owner``, connection refused, offline
partition) make the tailer forget the node's address and retry with backoff;
a corrupt batch is retried too (it is logged: never skipped silently).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from itertools import repeat
from operator import attrgetter
from typing import Protocol

import aiohttp

from vpq.codec.columnar import scan as scan_columns
from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import MAGIC_COLUMNAR, iter_batches
from vpq.common.errors import VpqError
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.messages import TailedRecord
from vpq.read_nodes.queue_index import QueueIndex
from vpq.read_nodes.read_ahead import ReadAhead
from vpq.read_nodes.record_cache import RecordCache
from vpq.read_nodes.record_decode import UnknownContexts, decode_tailed

log = logging.getLogger(__name__)

KEY_HASH_BITS = 32
_HASH_MASK = (1 << KEY_HASH_BITS) - 1


def _being_cancelled() -> bool:
    """True when someone asked to cancel the running task itself (not a future it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def pack_ref(context_id: int, key_hash: int) -> int:
    """The index ref of a record: its context id and key hash in one int64."""
    return (context_id << KEY_HASH_BITS) | key_hash


def unpack_ref(ref: int) -> tuple[int, int]:
    """``(context_id, key_hash)`` of ``pack_ref``."""
    return ref >> KEY_HASH_BITS, ref & _HASH_MASK


def index_columns(records: list[TailedRecord]) -> tuple[list[int], list[int], list[int], list[int]]:
    """``(offsets, queue_ids, refs, context_ids)`` of ``records``, as
    ``QueueIndex.add_columns`` takes them (``ref``: ``pack_ref``), a column at a time."""
    offsets = list(map(_offset_of, records))
    queue_ids = list(map(_queue_id_of, records))
    context_ids = list(map(_context_id_of, records))
    key_hashes = list(map(_key_hash_of, records))
    c = context_ids[0] if context_ids else 0
    if context_ids.count(c) == len(context_ids):  # one context: its high bits on every hash
        refs = list(map((c << KEY_HASH_BITS).__or__, key_hashes))
    else:
        refs = list(map(pack_ref, context_ids, key_hashes))
    return offsets, queue_ids, refs, context_ids


class ReadResultLike(Protocol):
    data: bytes
    start_offset: int
    end_offset: int


class PartitionReader(Protocol):
    """``node_rpc.write_node_client.WriteNodeClient`` is one."""

    async def read(self, address: str, pp: int, offset: int, max_bytes: int, wait_ms: int) -> ReadResultLike: ...


class NodeRefLike(Protocol):
    @property
    def address(self) -> str: ...


class PartitionLocator(Protocol):
    """``node_rpc.node_directory.WriteNodeDirectory`` is one."""

    async def owner(self, pp: int) -> NodeRefLike: ...

    def invalidate(self, pp: int) -> None: ...


ContextResolver = Callable[[int], Awaitable[IsolationContext]]
Listener = Callable[[int], None]

RecordKey = tuple[int, int]
IndexRow = tuple[int, int, int, int]
"""``(offset, queue_id, ref, context_id)``: what ``QueueIndex.add_many`` takes"""

_offset_of = attrgetter("offset")
_queue_id_of = attrgetter("queue_id")
_context_id_of = attrgetter("context_id")
_key_hash_of = attrgetter("key_hash")

_DECODE_SLICE = 128
"""``decode`` yields to the event loop between batches once it decoded this many records
(small, like ``ReadNodeOptions.ingest_batch``: requests wait for the slice in progress)."""


class RecordSource:
    """Decoded records by ``(pp, offset)``: the shared cache first, else one read from
    the owning write node (whose other records are cached too, so a reader far
    behind the tail costs one read per ``fetch_max_bytes``, not per record)."""

    def __init__(
        self,
        reader: PartitionReader,
        directory: PartitionLocator,
        resolve_context: ContextResolver,
        cache: RecordCache[RecordKey, TailedRecord],
        fetch_max_bytes: int = 1 << 20,
    ) -> None:
        self.reader = reader
        self.directory = directory
        self.cache = cache
        self._resolve = resolve_context
        self._fetch_max_bytes = fetch_max_bytes
        self._locks: dict[int, asyncio.Lock] = {}
        self._contexts: dict[int, IsolationContext] = {}
        self.cold: dict[int, frozenset[int]] = {}
        """queue id -> context ids no hosted group of the queue takes now: their records
        are indexed but not cached (they wait in the log; ``TailerPool.set_cold``)"""
        self.fetches = 0

    def cached(self, pp: int, offset: int) -> TailedRecord | None:
        return self.cache.get((pp, offset))

    def forget(self, pp: int, offset: int) -> None:
        """Drop the cached record at ``(pp, offset)`` (it is read again when wanted)."""
        self.cache.pop((pp, offset))

    def context(self, context_id: int) -> IsolationContext | None:
        """The isolation context of an id already met in a decoded record (no I/O)."""
        return self._contexts.get(context_id)

    async def get(self, pp: int, offset: int) -> TailedRecord | None:
        """The record at ``(pp, offset)``; None when the write node no longer has it
        (retention). Raises the write node's ``VpqError`` when it cannot be read now."""
        rec = self.cache.get((pp, offset))
        if rec is not None:
            return rec
        lock = self._locks.get(pp)
        if lock is None:
            lock = self._locks[pp] = asyncio.Lock()
        async with lock:
            rec = self.cache.get((pp, offset))
            if rec is not None:
                return rec
            address = (await self.directory.owner(pp)).address
            try:
                res = await self.reader.read(address, pp, offset, self._fetch_max_bytes, 0)
            except VpqError:
                self.directory.invalidate(pp)
                raise
            self.fetches += 1
            found: TailedRecord | None = None
            records, _ = await self.decode(pp, res.data, offset, cache_cold=True)
            for tailed in records:
                if tailed.offset == offset:
                    found = tailed
            return found

    async def decode(
        self, pp: int, data: bytes, from_offset: int, cache_cold: bool = False
    ) -> tuple[list[TailedRecord], int]:
        """Verify and decode raw batches and cache every record at or above
        ``from_offset`` (those of ``cold`` contexts only with ``cache_cold``: a read
        for a record someone needs); returns them and the offset after the last batch."""
        out: list[TailedRecord] = []
        end = from_offset
        yielded_at = 0
        put_many = self.cache.put_many
        contexts = self._contexts
        all_cold = self.cold
        check_cold = bool(all_cold) and not cache_cold
        for view in iter_batches(data, verify=True):
            if view.next_offset > end:
                end = view.next_offset
            if view.next_offset <= from_offset:
                continue
            if len(out) - yielded_at >= _DECODE_SLICE:
                yielded_at = len(out)
                await asyncio.sleep(0)  # a full read holds thousands of records: let requests in
            try:
                records, sizes = decode_tailed(view, pp, contexts)
            except UnknownContexts as exc:
                for cid in sorted(exc.ids):
                    resolved = await self._resolve(cid)
                    # another decode may have resolved it meanwhile: keep one object per
                    # context, so the delivery path's dict lookups match by identity
                    contexts.setdefault(cid, resolved)
                records, sizes = decode_tailed(view, pp, contexts)
            skip = from_offset - view.base_offset
            if skip > 0:
                records, sizes = records[skip:], sizes[skip:]
            if check_cold:
                put_many(
                    ((pp, t.offset), t, size)
                    for t, size in zip(records, sizes)
                    if t.context_id not in all_cold.get(t.queue_id, ())
                )
            else:
                put_many(zip(zip(repeat(pp), map(_offset_of, records)), records, sizes))
            out.extend(records)
        return out, end

    @staticmethod
    def index_rows(data: bytes, from_offset: int) -> tuple[list[IndexRow], int]:
        """Verify raw batches and return the index rows of their records at or above
        ``from_offset`` (values, keys and headers are not decoded, nothing is cached),
        and the offset after the last batch."""
        rows: list[IndexRow] = []
        end = from_offset
        for view in iter_batches(data, verify=True):
            if view.next_offset > end:
                end = view.next_offset
            if view.next_offset <= from_offset:
                continue
            base = view.base_offset
            if view.magic == MAGIC_COLUMNAR:
                cols = scan_columns(view, check_headers=False)  # the decode of a reader checks them
                rows.extend(
                    (base + i, qid, (ctx << KEY_HASH_BITS) | kh, ctx)  # pack_ref
                    for i, (qid, kh, ctx) in enumerate(zip(cols.queue_ids, cols.key_hashes, cols.context_ids))
                    if base + i >= from_offset
                )
            else:
                rows.extend(
                    (r.offset, r.queue_id, (r.context_id << KEY_HASH_BITS) | r.key_hash, r.context_id)
                    for r in view.records() if r.offset >= from_offset
                )
        return rows, end


class PartitionTailer:
    """Tails one pp (see the module docstring). ``start(offset)`` / ``stop()``."""

    def __init__(
        self,
        pp: int,
        source: RecordSource,
        *,
        max_bytes: int = 1 << 20,
        wait_ms: int = 1000,
        retry_ms: int = 200,
        truncate_every_s: float = 1.0,
        keep_offsets: int = 0,
        read_ahead_bytes: int = 0,
    ) -> None:
        self.pp = pp
        self._source = source
        self.read_ahead_bytes = read_ahead_bytes
        """reads starting further than this past the most advanced reader are only
        indexed (0: no bound; see the module docstring)"""
        self._ahead = ReadAhead()
        self.records_indexed_only = 0
        self._max_bytes = max_bytes
        self._wait_ms = wait_ms
        self._retry_s = retry_ms / 1000.0
        self._truncate_every_s = truncate_every_s
        self._keep = keep_offsets
        self.index = QueueIndex()
        self.log_start = 0
        self.known_end = 0
        self._pos = 0
        self._reset_to: int | None = None
        self._read: asyncio.Future[ReadResultLike] | None = None  # the long-poll in flight
        self._listeners: dict[object, Listener] = {}
        self._positions: dict[object, int] = {}
        self._task: asyncio.Task[None] | None = None
        self._last_truncate = time.monotonic()
        self.records_tailed = 0
        self.errors = 0

    # ---------------------------------------------------------------- lifecycle
    def start(self, offset: int) -> None:
        if self._task is not None:
            return
        self._restart_index(offset)
        self._task = asyncio.create_task(self._run(), name=f"vpq-tailer-pp{self.pp}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def running(self) -> bool:
        return self._task is not None

    # ------------------------------------------------------------------ readers
    def add_listener(self, key: object, listener: Listener) -> None:
        self._listeners[key] = listener

    def remove_listener(self, key: object) -> None:
        self._listeners.pop(key, None)
        self._positions.pop(key, None)
        self._ahead.forget(key)

    @property
    def listeners(self) -> int:
        return len(self._listeners)

    def set_position(self, key: object, offset: int, scanned_to: int | None = None) -> None:
        """Reader ``key`` no longer needs index entries below ``offset``; with
        ``scanned_to``, it has also scanned every record below that offset that it can
        take now (its read-ahead position)."""
        self._positions[key] = offset
        if scanned_to is not None:
            self._ahead.scanned(key, scanned_to)
        self._maybe_truncate()

    def require(self, offset: int) -> None:
        """Make the index cover ``offset`` onwards (re-reading from it when it starts later)."""
        offset = max(offset, self.log_start)
        if offset >= self.index.start_offset(self.pp):
            return
        if self._reset_to is None or offset < self._reset_to:
            self._reset_to = offset
            if self._read is not None:
                self._read.cancel()  # the loop starts again from the reset

    def covers(self, offset: int) -> bool:
        """True when every record from ``offset`` up to the index end is indexed."""
        return self.index.start_offset(self.pp) <= max(offset, self.log_start) and self._reset_to is None

    # --------------------------------------------------------------------- loop
    def _restart_index(self, offset: int) -> None:
        self.index = QueueIndex()
        self.index.truncate_below(self.pp, offset)
        self._pos = offset
        self._ahead.restart()

    async def _run(self) -> None:
        while True:
            if self._reset_to is not None:
                self._restart_index(self._reset_to)
                self._reset_to = None
                self._notify()
            try:
                address = (await self._source.directory.owner(self.pp)).address
                if self._reset_to is not None:
                    continue
                # awaited directly (not through asyncio.wait): this task resumes in the
                # loop iteration after the answer, ahead of what that answer wakes
                read = self._read = asyncio.ensure_future(
                    self._source.reader.read(address, self.pp, self._pos, self._max_bytes, self._wait_ms)
                )
                try:
                    res = await read
                except asyncio.CancelledError:
                    if not read.cancelled() or _being_cancelled():
                        raise
                    continue  # require() cancelled the read: start again from the reset
                finally:
                    self._read = None
                    if not read.done():
                        read.cancel()
                await self._take(res)
                if res.data:
                    # what the answer woke (ingestion, then the polls it feeds) goes
                    # before the next long-poll is sent: one loop iteration here
                    await asyncio.sleep(0)
            except asyncio.CancelledError:
                raise
            except VpqError as exc:
                self.errors += 1
                self._source.directory.invalidate(self.pp)
                log.info("pp %d: read failed (%s); retrying", self.pp, exc)
                await asyncio.sleep(self._retry_s)
            except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
                self.errors += 1
                self._source.directory.invalidate(self.pp)
                log.info("pp %d: write node unreachable (%s); retrying", self.pp, exc)
                await asyncio.sleep(self._retry_s)
            except CorruptBatchError as exc:
                self.errors += 1
                log.error("pp %d: corrupt data at offset %d: %s; retrying", self.pp, self._pos, exc)
                await asyncio.sleep(self._retry_s * 5)
            except Exception:
                self.errors += 1
                log.exception("pp %d: tailer error at offset %d; retrying", self.pp, self._pos)
                await asyncio.sleep(self._retry_s * 5)

    async def _take(self, res: ReadResultLike) -> None:
        self.log_start = res.start_offset
        self.known_end = max(self.known_end, res.end_offset)
        if self._reset_to is not None:
            return
        pos = self._pos
        if not res.data:
            # below the log start everything is gone (retention); below the durable end
            # with nothing to read, everything from here was compacted away
            skip_to = res.start_offset if pos < res.start_offset else res.end_offset
            if pos < skip_to:
                self.index.advance(self.pp, skip_to)
                self._pos = skip_to
                self._notify()
            return
        bound = self.read_ahead_bytes
        pp = self.pp
        if bound and self._ahead.ahead() >= bound:
            rows, end = self._source.index_rows(res.data, pos)
            self.records_indexed_only += len(rows)
            self.index.add_many(pp, rows)
            taken = len(rows)
        else:
            records, end = await self._source.decode(pp, res.data, pos)
            if self._reset_to is not None or pos != self._pos:
                return  # reset while decoding: the index was replaced
            self.index.add_columns(pp, *index_columns(records))
            taken = len(records)
        index = self.index
        self._ahead.read(end, len(res.data))
        self._pos = end
        index.advance(pp, end)
        self.records_tailed += taken
        self._maybe_truncate()
        self._notify()

    def _maybe_truncate(self) -> None:
        now = time.monotonic()
        if now - self._last_truncate < self._truncate_every_s or not self._positions:
            return
        self._last_truncate = now
        low = min(self._positions.values()) - self._keep
        if low > self.index.start_offset(self.pp):
            self.index.truncate_below(self.pp, low)

    def _notify(self) -> None:
        for listener in list(self._listeners.values()):
            try:
                listener(self.pp)
            except Exception:
                log.exception("pp %d: listener failed", self.pp)
