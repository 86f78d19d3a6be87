"""Compaction of one sealed segment: drop the records of deleted and expired queues,
keep the offsets of everything else.

Contract:
- the unit is the batch. A batch whose records are all dead (``QueuePolicy.dead``:
  their queue is deleted, or they are older than their queue's retention) is
  dropped; a batch whose records all live is copied byte for byte; a batch with
  both is rewritten as one magic-2 batch per run of consecutive live records, each
  at the offset its first record had, so every surviving record keeps its offset
  (magic 2 numbers records ``base + i``). Nothing else changes: keys, values,
  headers, timestamps, contexts are the records' own;
- the new segment has the old one's base offset and an end marker
  (``write_nodes.end_marker``) holding the old ``next_offset``, so the segments
  still continue each other and recovery accepts the gaps;
- crash-safe, through ``storage``: the new data goes to ``<base>.log.tmp`` and is
  fsynced; the end marker is written (tmp, fsync, rename); the old index files are
  removed and the directory fsynced (the old data with no index is rebuilt from its
  headers, the old data with the marker is still exactly the old segment); the tmp
  file is renamed over ``<base>.log`` and the directory fsynced; then the new
  indexes are written (tmp, fsync, rename) and the directory fsynced. A crash at any
  point leaves either the old segment or the new one, never a mix that loses a
  record the old one served (leftover ``.tmp`` files are removed on open);
- reads go through a :class:`Throttle` (``max_bytes_per_s``, 0 = no limit; busy at most
  ``duty`` of the time) so a pass leaves the disk and the CPU to appends and reads;
- :func:`summarize` reads a segment once and says, per queue id, the oldest and
  newest timestamps and the bytes of its records there (what the log needs to decide
  retention and whether a compaction is worth it, without reading it again).

Pure apart from the segment reads and ``storage`` calls; runs on an I/O thread and
never touches the log's live bookkeeping (the log swaps the new segment in).
"""

from __future__ import annotations

import os
import sys
import time
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

from vpq.codec.columnar import (
    FIXED_RECORD_BYTES,
    MAGIC_COLUMNAR,
    ColumnarRecords,
    build_columnar_batch,
    columns_of,
    scan,
)
from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import HEADER, HEADER_SIZE, LENGTH_END, BatchView, Record, header_problem
from vpq.write_nodes import filenames
from vpq.write_nodes.end_marker import write_end_marker
from vpq.write_nodes.retention import QueuePolicy
from vpq.write_nodes.segment import LogSegment
from vpq.write_nodes.storage import fsync_directory

_WRITE_CHUNK = 1024 * 1024


@dataclass(slots=True)
class QueueFigures:
    oldest_ms: int
    newest_ms: int
    nbytes: int


@dataclass(slots=True)
class SegmentSummary:
    """Per queue id: its records' timestamps and bytes in one segment (``size`` bytes)."""

    size: int
    queues: dict[int, QueueFigures] = field(default_factory=dict)

    def add(self, queue_id: int, oldest: int, newest: int, nbytes: int) -> None:
        q = self.queues.get(queue_id)
        if q is None:
            self.queues[queue_id] = QueueFigures(oldest, newest, nbytes)
            return
        if oldest < q.oldest_ms:
            q.oldest_ms = oldest
        if newest > q.newest_ms:
            q.newest_ms = newest
        q.nbytes += nbytes

    def newest_by_queue(self) -> dict[int, int]:
        return {qid: q.newest_ms for qid, q in self.queues.items()}

    def dead_bytes(self, policy: QueuePolicy, now_ms: int) -> int:
        """Bytes that are surely dead: queues whose newest record here is dead."""
        return sum(q.nbytes for qid, q in self.queues.items() if policy.dead(qid, q.newest_ms, now_ms))

    def any_dead(self, policy: QueuePolicy, now_ms: int) -> bool:
        return any(policy.dead(qid, q.oldest_ms, now_ms) for qid, q in self.queues.items())


class CompactionAbandoned(Exception):
    """The compaction stopped before replacing anything (an ``OSError`` such as a full
    disk while writing the new data, or a damaged batch, which is never rewritten): the
    old segment stands, the log stays online."""


@dataclass(frozen=True, slots=True)
class CompactResult:
    segment: LogSegment
    bytes_before: int
    bytes_after: int
    batches_dropped: int
    batches_split: int
    summary: SegmentSummary


class Throttle:
    """Keeps a thread's reads at or under ``bytes_per_s`` (0: no limit) and its busy time
    at or under ``duty`` of the wall time (1.0: no limit), by sleeping (which also leaves
    the interpreter lock to the event loop that serves appends and reads)."""

    _BURST_S = 0.005

    def __init__(self, bytes_per_s: int, duty: float = 1.0) -> None:
        self._rate = bytes_per_s
        self._duty = duty
        self._start = self._burst = time.monotonic()
        self._bytes = 0

    def account(self, nbytes: int) -> None:
        if self._rate <= 0:
            return
        self._bytes += nbytes
        ahead = self._bytes / self._rate - (time.monotonic() - self._start)
        if ahead > 0:
            time.sleep(ahead)
            self._burst = time.monotonic()

    def pace(self) -> None:
        """Call between units of work: rests once the current burst is long enough."""
        if self._duty >= 1.0:
            return
        worked = time.monotonic() - self._burst
        if worked >= self._BURST_S:
            time.sleep(worked * (1.0 - self._duty) / self._duty)
            self._burst = time.monotonic()


class BatchFigures:
    """What compaction needs of one batch, read without its keys and values when it
    can: its position and size, its queue ids, its oldest and newest timestamps, and
    (only when asked) each record's queue id, timestamp and bytes. A magic-2 batch is
    read as its header and fixed-width columns only; ``raw()`` reads the whole batch."""

    __slots__ = ("seg", "pos", "size", "count", "first_ts", "newest", "oldest", "queue_ids", "_cols", "_raw",
                 "_throttle")

    def __init__(self, seg: LogSegment, pos: int, throttle: Throttle) -> None:
        self.seg, self.pos, self._throttle = seg, pos, throttle
        head = seg.pread(pos, HEADER_SIZE)
        if len(head) < HEADER_SIZE:
            raise CorruptBatchError(f"segment {seg.base_offset} position {pos}: torn batch header")
        base, length, magic, _crc, attrs, last_delta, first_ts, max_ts, n = HEADER.unpack_from(head, 0)
        problem = header_problem(base, length, magic, attrs, last_delta, n)
        if problem is not None:
            raise CorruptBatchError(f"segment {seg.base_offset} position {pos}: {problem}")
        self.size, self.count, self.first_ts, self.newest = LENGTH_END + length, n, first_ts, max_ts
        self._raw: bytes | None = None
        if magic == MAGIC_COLUMNAR:
            fixed = FIXED_RECORD_BYTES * n
            data = seg.pread(pos + HEADER_SIZE, fixed)
            throttle.account(HEADER_SIZE + len(data))
            if len(data) != fixed or HEADER_SIZE + fixed > self.size:
                raise CorruptBatchError(f"segment {seg.base_offset} position {pos}: columns cut short")
            mv = memoryview(data)
            q4 = 4 * n
            qids = _column("I", mv[:q4])
            deltas = _column("q", mv[4 * q4 : 6 * q4])
            lens = (_column("i", mv[6 * q4 : 7 * q4]), _column("I", mv[7 * q4 : 8 * q4]), _column("I", mv[8 * q4 : 9 * q4]))
            self._cols: tuple[array, array, tuple[array, array, array]] | None = (qids, deltas, lens)
            self.queue_ids = set(qids)
            self.oldest = first_ts + min(deltas)
        else:
            self._cols = None
            recs = BatchView(self.raw(), 0).records()
            self.queue_ids = {r.queue_id for r in recs}
            stamps = [r.timestamp_ms for r in recs if r.timestamp_ms is not None] or [max_ts]
            self.oldest, self.newest = min(stamps), max(stamps)

    def raw(self) -> bytes:
        """The whole batch (read once)."""
        if self._raw is None:
            raw = self.seg.pread(self.pos, self.size)
            self._throttle.account(len(raw))
            if len(raw) != self.size:
                raise CorruptBatchError(f"segment {self.seg.base_offset} position {self.pos}: torn batch")
            self._raw = raw
        return self._raw

    def verdict(self, policy: QueuePolicy, now_ms: int) -> bool | list[bool]:
        """True: every record lives; False: every record is dead; else one bool per record."""
        dead = policy.dead
        if all(dead(q, self.newest, now_ms) for q in self.queue_ids):
            return False
        if not any(dead(q, self.oldest, now_ms) for q in self.queue_ids):
            return True
        return [not dead(q, ts, now_ms) for q, ts, _ in self.records()]

    def records(self) -> list[tuple[int, int, int]]:
        """(queue id, timestamp ms, bytes) of each record; a record's bytes are its share
        of the batch (the batch header spread evenly)."""
        n = self.count
        if self._cols is not None:
            qids, deltas, (kls, vls, hls) = self._cols
            sizes = [FIXED_RECORD_BYTES + max(k, 0) + v + h for k, v, h in zip(kls, vls, hls)]
            extra = (self.size - sum(sizes)) / n
            first = self.first_ts
            return [(q, first + d, int(sz + extra)) for q, d, sz in zip(qids, deltas, sizes)]
        each = self.size // n
        recs = BatchView(self.raw(), 0).records()
        return [(r.queue_id, r.timestamp_ms if r.timestamp_ms is not None else self.newest, each) for r in recs]

    def add_to(self, summary: SegmentSummary, live: list[bool] | None = None) -> None:
        """Count the batch (or, with ``live``, its live records) in ``summary``."""
        if live is None and len(self.queue_ids) == 1:
            summary.add(next(iter(self.queue_ids)), self.oldest, self.newest, self.size)
            return
        for i, (q, ts, nbytes) in enumerate(self.records()):
            if live is None or live[i]:
                summary.add(q, ts, ts, nbytes)


def _column(code: str, buf: memoryview) -> array:
    col = array(code)
    col.frombytes(buf)
    if sys.byteorder == "big":  # pragma: no cover - the format is little-endian
        col.byteswap()
    return col


def iter_figures(seg: LogSegment, limit: int, throttle: Throttle) -> Iterator[BatchFigures]:
    """The figures of every batch in the first ``limit`` bytes of ``seg``."""
    pos = 0
    while pos + HEADER_SIZE <= limit:
        throttle.pace()
        figures = BatchFigures(seg, pos, throttle)
        if pos + figures.size > limit:
            raise CorruptBatchError(f"segment {seg.base_offset} position {pos}: batch beyond {limit}")
        yield figures
        pos += figures.size


def summarize(seg: LogSegment, limit: int, max_bytes_per_s: int = 0, duty: float = 1.0) -> SegmentSummary:
    summary = SegmentSummary(limit)
    for figures in iter_figures(seg, limit, Throttle(max_bytes_per_s, duty)):
        figures.add_to(summary)
    return summary


def _runs(records: list[Record], live: list[bool]) -> list[list[Record]]:
    runs: list[list[Record]] = []
    current: list[Record] = []
    for rec, ok in zip(records, live):
        if ok:
            current.append(rec)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def _rewrite(view: BatchView, live: list[bool]) -> list[bytes]:
    """One magic-2 batch per run of consecutive live records, at the run's first offset."""
    if view.magic == MAGIC_COLUMNAR:
        return _rewrite_columns(view, live)
    out = []
    for run in _runs(view.records(), live):
        ts = run[0].timestamp_ms if run[0].timestamp_ms is not None else view.first_ts
        out.append(build_columnar_batch(run[0].offset, ts, columns_of(run, ts)))
    return out


def _rewrite_columns(view: BatchView, live: list[bool]) -> list[bytes]:
    """``_rewrite`` of a magic-2 batch straight from its columns (no ``Record`` objects)."""
    cols = scan(view)
    buf = view.buf
    keys: list[bytes | None] = []
    values: list[bytes] = []
    headers: list[bytes] = []
    kp, vp, hp = cols.keys_at, cols.values_at, cols.headers_at
    for k, v, h in zip(cols.key_lengths, cols.value_lengths, cols.header_lengths):
        if k < 0:
            keys.append(None)
        else:
            keys.append(bytes(buf[kp : kp + k]))
            kp += k
        values.append(bytes(buf[vp : vp + v]))
        vp += v
        headers.append(bytes(buf[hp : hp + h]))
        hp += h
    has_headers = any(cols.header_lengths)
    out = []
    n = len(live)
    i = 0
    while i < n:
        if not live[i]:
            i += 1
            continue
        j = i
        while j < n and live[j]:
            j += 1
        d0 = cols.ts_deltas[i]
        deltas = [d - d0 for d in cols.ts_deltas[i:j]]
        run = ColumnarRecords(
            queue_ids=cols.queue_ids[i:j],
            vps=cols.vps[i:j],
            key_hashes=cols.key_hashes[i:j],
            context_ids=cols.context_ids[i:j],
            keys=keys[i:j],
            values=values[i:j],
            encodings=bytes(cols.encodings[i:j]),
            headers=headers[i:j] if has_headers else None,
            ts_deltas=deltas if any(deltas) else None,
        )
        out.append(build_columnar_batch(view.base_offset + i, view.first_ts + d0, run))
        i = j
    return out


def compact_segment(
    seg: LogSegment, policy: QueuePolicy, now_ms: int, max_bytes_per_s: int = 0, duty: float = 1.0
) -> CompactResult:
    """Rewrite sealed segment ``seg`` (all of it durable, no I/O in flight, not the
    active one) without its dead records; returns the new, open segment (bookkeeping
    and index files done). ``seg`` itself is left open and untouched: the caller swaps
    and closes it. ``CompactionAbandoned`` for an ``OSError`` before the rename (the
    tmp file is removed when possible; the old segment stands); ``OSError`` after it
    (the old segment's open file still serves the same records: the caller should
    reopen the log, which recovers the new one)."""
    storage, directory, base = seg.storage, seg.directory, seg.base_offset
    end_offset = seg.next_offset
    limit = seg.size
    log_path = filenames.log_file(directory, base)
    tmp = filenames.tmp_file(log_path)
    try:
        fd = storage.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except OSError as exc:
        raise CompactionAbandoned(f"segment {base}: {exc}") from exc
    written: list[tuple[int, int, int, int]] = []
    summary = SegmentSummary(0)
    dropped = split = 0
    pending: list[bytes] = []
    pending_bytes = 0
    try:
        for figures in iter_figures(seg, limit, Throttle(max_bytes_per_s, duty)):
            live = figures.verdict(policy, now_ms)
            if live is True or (live is not False and all(live)):
                batches = [figures.raw()]
                figures.add_to(summary)
            elif live is False or not any(live):
                dropped += 1
                continue
            else:
                split += 1
                view = BatchView(figures.raw(), 0)
                if not view.verify_crc():  # never give a damaged batch a fresh CRC
                    raise CorruptBatchError(f"segment {base} position {figures.pos}: CRC mismatch")
                batches = _rewrite(view, live)
                figures.add_to(summary, live)
            for raw in batches:
                b = BatchView(raw, 0)
                written.append((b.base_offset, b.next_offset, b.max_ts, b.size))
                pending.append(raw)
                pending_bytes += len(raw)
            if pending_bytes >= _WRITE_CHUNK:
                storage.write_all(fd, pending)
                pending, pending_bytes = [], 0
        if pending:
            storage.write_all(fd, pending)
        storage.fsync(fd)
        storage.close(fd)
        fd = -1
        write_end_marker(storage, directory, base, end_offset)
        seg.remove_index_files()
        fsync_directory(storage, directory)
    except BaseException as exc:
        if fd >= 0:
            try:
                storage.close(fd)
            except OSError:
                pass
        try:
            storage.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, (OSError, CorruptBatchError)):
            raise CompactionAbandoned(f"segment {base}: {exc}") from exc
        raise
    storage.replace(tmp, log_path)
    fsync_directory(storage, directory)
    new = LogSegment.open(directory, base, seg.index_interval_bytes, seg.created_ms, storage)
    try:
        new.end_marker = end_offset
        for b, nxt, max_ts, size in written:
            new.track_append(b, nxt, max_ts, size)
        new.apply_end_marker()
        new.mark_durable(new.size)
        new.seal_time_index()
        new.write_indexes(storage.fsync)
        fsync_directory(storage, directory)
    except BaseException:
        new.close()
        raise
    summary.size = new.size
    return CompactResult(new, limit, new.size, dropped, split, summary)
