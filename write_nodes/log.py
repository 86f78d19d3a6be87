"""``PartitionLog``: one physical partition = one directory of segments.

Contract:
- ``await start()`` opens (and repairs) the directory and returns the
  :class:`RecoveryReport`; ``await stop()`` writes every pending append, fsyncs,
  writes the indexes and the recovery-point checkpoint, closes the files;
- ``await append(records)`` (a magic-2 batch) assigns consecutive offsets and returns
  ``(base_offset, last_offset)`` once durable under the fsync policy (``group``:
  fsynced). Concurrent appends become one batch each, in call order, and are
  group-committed (one write and one fsync for many appends);
- ``read(offset, max_bytes)`` returns raw whole batches starting with the batch
  containing ``offset`` (so the first batch may begin before ``offset``), from a
  single segment, at least one batch even if it is larger than ``max_bytes``,
  and ``b""`` at the readable end. Only data below ``durable_end_offset`` is
  readable, so a reader never sees a message a crash could take back. The
  batches are not CRC-checked here: consumers of raw batches verify them;
- an ``OSError`` takes the partition offline: every later append or read raises
  :class:`PartitionOfflineError` until the log is stopped and started again;
- except a full disk (ENOSPC/EDQUOT while writing appends): those appends and every
  one queued behind them raise :class:`DiskFullError`, nothing of them stays in the
  files, the log stays online, and the next append takes the first refused offset.
- ``await compact(policy)`` (``write_nodes.compaction``) rewrites the sealed segments
  below the recovery point that are mostly dead under ``policy`` (deleted queues,
  records past their queue's retention), keeping every surviving record's offset,
  while appends and reads go on. Offsets may then have gaps: ``read`` of an offset
  that was compacted away returns the batches from the next surviving offset on
  (possibly in a later segment), like Kafka after compaction. ``apply_retention``
  (run by the housekeeping task) deletes a segment only when the log's limits say so
  and, once ``compact`` has given a policy, every queue with records in it is past
  its own retention (``retention.QueuePolicy.queues_past``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import HEADER, BatchView, Record, restamp_base_offset
from vpq.common.waits import wait_event
from vpq.config.settings import LogSettings
from vpq.write_nodes import filenames
from vpq.write_nodes.appender import AppendMeta, SegmentAppender
from vpq.write_nodes.checkpoint import write_checkpoint
from vpq.write_nodes.compaction import SegmentSummary
from vpq.write_nodes.end_marker import write_end_marker
from vpq.write_nodes.errors import LogIOError, OffsetOutOfRangeError, PartitionOfflineError
from vpq.write_nodes.group_commit import FULL_ERRNOS, FsyncFn, GroupCommitter, WriteFn
from vpq.write_nodes.log_compaction import CompactionTotals, LogCompaction
from vpq.write_nodes.recovery import LogLoader, RecoveryReport
from vpq.write_nodes.retention import QueuePolicy, SegmentInfo, segments_to_delete
from vpq.write_nodes.segments import LogSegments
from vpq.write_nodes.storage import OS_STORAGE, Storage

MAX_BATCH_BYTES = 1 << 30


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionLog(LogCompaction):
    """A durable, segmented, append-only log of record batches."""

    def __init__(
        self,
        directory: Path,
        settings: LogSettings,
        partition_id: int = 0,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
        fsync: FsyncFn | None = None,
        write_sync: WriteFn | None = None,
        history_size: int = 0,
        on_group: Callable[[int], None] | None = None,
        storage: Storage = OS_STORAGE,
    ) -> None:
        """Every file call goes through ``storage`` (the real file system by default).
        ``fsync`` syncs one fd (called on the I/O thread; default ``storage.fdatasync``);
        ``write_sync`` writes and syncs one fd in one call (default
        ``storage.write_all_dsync``, none when ``fsync`` is given: then every sync is an
        ``fsync`` call);
        ``on_group`` is called on the loop thread with the number of records each
        completed group commit made durable (it must not raise: it runs inside the
        commit's completion)."""
        self.directory = Path(directory)
        self.settings = settings
        self.partition_id = partition_id
        self._clock_ms = clock_ms
        self.storage = storage
        self._fsync = fsync if fsync is not None else storage.fdatasync
        self._write_sync = write_sync if write_sync is not None or fsync is not None else storage.write_all_dsync
        self._history_size = history_size
        self._on_group = on_group
        self._durable_seen = 0
        self._segments = LogSegments()
        self._appender: SegmentAppender | None = None
        self._committer: GroupCommitter | None = None
        self._dir_fd = -1
        self._next_offset = 0
        self.on_rewind: Callable[[int], None] | None = None  # e.g. the dedup index's forget_from
        self._error: PartitionOfflineError | None = None
        self._running = False
        self._advanced: asyncio.Event | None = None  # made by the first waiter of a durable advance
        self._housekeeping: asyncio.Task[None] | None = None
        self._checkpointed: int | None = None
        self._checkpoint_lock = asyncio.Lock()
        self._compaction_lock = asyncio.Lock()
        self._policy: QueuePolicy | None = None
        self.retention_waits_for_policy = False
        """when True, retention deletes nothing until ``compact`` has given a policy (a
        write node sets it: its logs hold queues whose own retention must be known)"""
        self._summaries: dict[int, SegmentSummary] = {}
        self.compactions = CompactionTotals()
        self.report: RecoveryReport | None = None

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> RecoveryReport:
        """Open the directory (recovering it) and start the group committer."""
        if self._running:
            raise RuntimeError("log already started")
        loop = asyncio.get_running_loop()
        storage = self.storage
        loader = LogLoader(self.directory, self.settings.index_interval_bytes, self._clock_ms(), storage)
        try:
            self._segments, report = await loop.run_in_executor(None, loader.load)
            self._dir_fd = storage.open_dir(self.directory)
            end = report.recovered_end_offset
            if report.recovery_point is None or report.recovery_point > end:
                try:
                    await loop.run_in_executor(None, write_checkpoint, self.directory, end, storage)
                    self._checkpointed = end
                except OSError as exc:
                    if exc.errno not in FULL_ERRNOS:
                        raise
                    # a full disk: no checkpoint rather than one past the end (the next
                    # recovery then checks every segment); written once there is space
                    await loop.run_in_executor(None, _remove_checkpoint, self.directory, storage)
                    self._checkpointed = None
            else:
                self._checkpointed = report.recovery_point
        except OSError as exc:
            self._close_files()
            raise LogIOError(f"partition {self.partition_id}: cannot open {self.directory}: {exc}", self.partition_id) from exc
        self._next_offset = self._durable_seen = report.recovered_end_offset
        self._appender = SegmentAppender(
            self.directory,
            self._segments,
            self.settings,
            self._dir_fd,
            self._clock_ms,
            on_durable=self._on_durable,
            on_failed=self._on_failed,
            on_rewind=self._on_rewind,
        )
        self._committer = GroupCommitter(
            self._appender,
            policy=self.settings.fsync_policy,
            fsync_interval_ms=self.settings.fsync_interval_ms,
            max_group_bytes=self.settings.max_group_bytes,
            fsync=self._fsync,
            write=storage.write_all,
            truncate=storage.truncate,
            name=f"p{self.partition_id}",
            history_size=self._history_size,
            write_sync=self._write_sync,
            inline_idle_ms=self.settings.inline_commit_idle_ms,
        )
        await self._committer.start()
        self._error = None
        self._running = True
        self._housekeeping = asyncio.create_task(self._housekeep(), name=f"log-housekeeping-{self.partition_id}")
        self.report = report
        return report

    async def stop(self) -> None:
        """Write and fsync pending appends, write indexes and the checkpoint, close.
        Raises ``PartitionOfflineError`` if the partition had gone offline (files are
        closed anyway; the next start recovers)."""
        if not self._running:
            return
        self._running = False
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            await asyncio.gather(self._housekeeping, return_exceptions=True)
            self._housekeeping = None
        async with self._compaction_lock:  # a segment being rewritten finishes first
            pass
        loop = asyncio.get_running_loop()
        try:
            assert self._committer is not None
            await self._committer.stop()
            if self._error is None:
                async with self._checkpoint_lock:
                    await loop.run_in_executor(None, self._write_final_state)
        except OSError as exc:
            self._on_failed(self._wrap(exc))
        finally:
            self._close_files()
            self._wake()
        if self._error is not None:
            raise self._error

    def _write_final_state(self) -> None:
        active = self._segments.active
        assert active is not None
        active.seal_time_index()
        active.write_indexes(self._fsync)
        self.storage.fsync(self._dir_fd)
        write_checkpoint(self.directory, active.next_offset, self.storage)

    def _close_files(self) -> None:
        for seg in self._segments:
            with contextlib.suppress(OSError):
                seg.close()
        if self._dir_fd >= 0:
            with contextlib.suppress(OSError):
                self.storage.close(self._dir_fd)
            self._dir_fd = -1

    # --------------------------------------------------------------- properties
    @property
    def online(self) -> bool:
        return self._running and self._error is None

    @property
    def start_offset(self) -> int:
        first = self._segments.first
        return first.base_offset if first is not None else 0

    @property
    def end_offset(self) -> int:
        """The next offset to assign."""
        return self._next_offset

    @property
    def durable_end_offset(self) -> int:
        """Offsets below this are durable (fsynced under the ``group`` policy) and readable."""
        return self._appender.durable_end if self._appender is not None else self._next_offset

    @property
    def size_bytes(self) -> int:
        return self._segments.total_size()

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def commit_counts(self) -> tuple[int, int]:
        """(group commits, of which written on the event loop) since the log started;
        (0, 0) before it started."""
        c = self._committer
        return (c.groups, c.inline_groups) if c is not None else (0, 0)

    @property
    def committer(self) -> GroupCommitter:
        """The group committer (for its counters: ``fsyncs``, ``groups``, ``writes``, ``history``)."""
        if self._committer is None:
            raise RuntimeError("log not started")
        return self._committer

    # ------------------------------------------------------------------ appends
    async def append(self, records: Sequence[Record], timestamp_ms: int | None = None) -> tuple[int, int]:
        """Append ``records`` as one magic-2 batch (``codec.columnar``; records without
        their own timestamp get ``timestamp_ms``, default the log's clock); returns
        (base_offset, last_offset) once durable. ``ValueError`` for an empty batch or a
        field out of range (nothing appended)."""
        self._check_online()
        ts = self._clock_ms() if timestamp_ms is None else timestamp_ms
        base = self._next_offset
        batch = build_columnar_batch(base, ts, columns_of(records, ts))
        return await self._submit(batch, base, len(records), HEADER.unpack_from(batch, 0)[7])

    def submit_checked(self, batch: bytes, view: BatchView) -> Awaitable[tuple[int, int]]:
        """Place one pre-built batch whose CRC and record area the caller has already
        checked (``view`` is its header), at once and without yielding: the base offset
        is assigned and the write queued before this returns. Await the result for
        (base_offset, last_offset) once durable. ``ValueError`` when ``view`` does not
        cover exactly ``batch``; ``LogIOError`` when the log is offline."""
        self._check_online()
        if view.size != len(batch):
            raise ValueError(f"expected exactly one batch, got {len(batch)} bytes for a {view.size}-byte batch")
        base = self._next_offset
        fut = self._submit_now(restamp_base_offset(batch, base), base, view.record_count, view.max_ts)
        return _durable(fut, base, base + view.record_count - 1)

    def submit_replica(self, batch: bytes) -> asyncio.Future[None]:
        """Place one batch copied from a leader as it is (its offsets kept): its base
        offset must be the log's next offset (``skip_to`` first past a gap) and its CRC
        valid (``ValueError`` otherwise, nothing placed). The future resolves once it is
        durable."""
        self._check_online()
        view = BatchView(batch, 0)
        if view.size != len(batch):
            raise ValueError(f"expected exactly one batch, got {len(batch)} bytes for a {view.size}-byte batch")
        if view.base_offset != self._next_offset:
            raise ValueError(f"batch at offset {view.base_offset} does not continue the log at {self._next_offset}")
        if not view.verify_crc():
            raise ValueError(f"batch at offset {view.base_offset}: CRC mismatch")
        return self._submit_now(batch, view.base_offset, view.record_count, view.max_ts)

    async def _submit(self, batch: bytes, base: int, count: int, max_ts: int) -> tuple[int, int]:
        await self._submit_now(batch, base, count, max_ts)
        return base, base + count - 1

    async def skip_to(self, offset: int) -> None:
        """Continue the log at ``offset`` (past its end), leaving a gap: a follower copying
        a range its leader compacted away. Every append must be durable first
        (``ValueError`` otherwise). The active segment's end marker (``end_marker``) is set
        to ``offset`` and made durable (with a directory fsync) before the log moves on, so
        recovery accepts gaps in that segment and the next segment still continues it."""
        self._check_online()
        if offset <= self._next_offset:
            return
        if self.durable_end_offset != self._next_offset:
            raise ValueError(f"cannot skip to {offset}: appends up to {self._next_offset} are not durable yet")
        seg = self._segments.active
        assert seg is not None and self._appender is not None
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self._write_skip_marker, seg.base_offset, offset)
        except OSError as exc:
            raise self._fail(exc) from exc
        if self._segments.active is not seg or self._next_offset > offset:
            raise ValueError(f"the log moved while skipping to {offset}")
        seg.end_marker = offset
        seg.apply_end_marker()
        self._next_offset = offset
        self._appender.skipped_to(offset)
        self._on_durable(offset)

    def _write_skip_marker(self, base: int, offset: int) -> None:
        write_end_marker(self.storage, self.directory, base, offset)
        self.storage.fsync(self._dir_fd)

    def _submit_now(self, batch: bytes, base: int, count: int, max_ts: int) -> asyncio.Future[None]:
        if len(batch) > MAX_BATCH_BYTES:
            raise ValueError(f"batch of {len(batch)} bytes exceeds {MAX_BATCH_BYTES}")
        assert self._committer is not None
        fut = self._committer.submit(batch, AppendMeta(base, base + count, max_ts))
        self._next_offset = base + count
        return fut

    # -------------------------------------------------------------------- reads
    def read(self, offset: int, max_bytes: int) -> bytes:
        """Raw whole batches from the batch containing ``offset`` (see module doc).
        ``OffsetOutOfRangeError`` below the start or beyond the end of the log."""
        self._check_online()
        if offset < self.start_offset or offset > self._next_offset:
            raise OffsetOutOfRangeError(offset, self.start_offset, self._next_offset)
        if offset >= self.durable_end_offset:
            return b""
        seg = self._segments.floor(offset)
        assert seg is not None
        try:
            while True:
                data = seg.read(offset, max(1, max_bytes), seg.durable_size)
                if data:
                    return data
                seg = self._segments.after(seg)  # compacted away to the segment's end
                if seg is None or seg.base_offset >= self.durable_end_offset:
                    return b""
                offset = seg.base_offset
        except OSError as exc:
            raise self._fail(exc) from exc

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The first readable offset whose record timestamp is >= ``timestamp_ms``
        (Kafka semantics: exact for non-decreasing timestamps), ``None`` if none."""
        self._check_online()
        try:
            for seg in self._segments:
                if seg.durable_size == 0 or seg.max_timestamp < timestamp_ms:
                    continue
                found = seg.find_timestamp(timestamp_ms, seg.durable_size)
                if found is not None:
                    return found
        except OSError as exc:
            raise self._fail(exc) from exc
        return None

    async def wait_for(self, offset: int, timeout_s: float) -> bool:
        """Wait until ``durable_end_offset > offset`` (True) or ``timeout_s`` passes,
        the log stops or goes offline (False)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.durable_end_offset <= offset:
            if not self.online:
                return False
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            event = self._advanced
            if event is None:
                event = self._advanced = asyncio.Event()
            if not await wait_event(event, remaining):
                return self.durable_end_offset > offset
        return True

    # -------------------------------------------------------------- maintenance
    def apply_retention(self, now_ms: int | None = None) -> int:
        """Delete whole old segments by ``retention_ms`` / ``retention_bytes`` (never the
        active one, nor one with I/O in flight). Returns how many were deleted."""
        self._check_online()
        assert self._appender is not None
        if self._policy is None and self.retention_waits_for_policy:
            return 0
        now = self._clock_ms() if now_ms is None else now_ms
        active = self._segments.active
        segs = list(self._segments)
        infos = [
            SegmentInfo(
                s.base_offset,
                s.size,
                s.max_timestamp,
                s is not active and s.pending_io == 0 and not self._appender.is_dirty(s),
                self._queues_past(s, now),
            )
            for s in segs
        ]
        count = segments_to_delete(infos, now, self.settings.retention_bytes, self.settings.retention_ms)
        try:
            for seg in segs[:count]:
                self._segments.remove(seg)
                self._summaries.pop(seg.base_offset, None)
                seg.delete()
        except OSError as exc:
            raise self._fail(exc) from exc
        return count

    async def checkpoint(self) -> int:
        """Write the recovery-point checkpoint now (offsets below it are fsynced with
        their indexes). Returns the recovery point written (the previous one when the
        disk is full: a checkpoint only saves recovery work, so it waits for space)."""
        async with self._checkpoint_lock:  # one writer of the tmp file at a time (periodic vs explicit)
            self._check_online()
            assert self._appender is not None
            point = self._appender.synced_end
            if point != self._checkpointed:
                done = asyncio.get_running_loop().run_in_executor(
                    None, write_checkpoint, self.directory, point, self.storage
                )
                try:
                    await asyncio.shield(done)
                except asyncio.CancelledError:  # keep the lock until the thread has finished the file
                    await asyncio.gather(done, return_exceptions=True)
                    raise
                except OSError as exc:
                    if exc.errno in FULL_ERRNOS:  # the old recovery point stays valid: try later
                        return self._checkpointed if self._checkpointed is not None else 0
                    raise self._fail(exc) from exc
                self._checkpointed = point
            return point

    async def _housekeep(self) -> None:
        interval = self.settings.checkpoint_interval_ms / 1000.0
        while self.online:
            await asyncio.sleep(interval)
            try:
                await self.checkpoint()
                self.apply_retention()
            except LogIOError:
                return

    # ---------------------------------------------------------------- failures
    def _check_online(self) -> None:
        if self._error is not None:
            raise self._error
        if not self._running:
            raise PartitionOfflineError(f"partition {self.partition_id} is not started", self.partition_id)

    def _wrap(self, exc: OSError) -> PartitionOfflineError:
        err = PartitionOfflineError(f"partition {self.partition_id}: I/O error, partition offline: {exc}", self.partition_id)
        err.__cause__ = exc
        return err

    def _fail(self, exc: OSError) -> PartitionOfflineError:
        self._on_failed(self._wrap(exc))
        assert self._error is not None
        return self._error

    def _on_failed(self, error: LogIOError) -> None:
        if self._error is None:
            if not isinstance(error, PartitionOfflineError):
                wrapped = PartitionOfflineError(str(error), self.partition_id)
                wrapped.__cause__ = error
                error = wrapped
            self._error = error  # type: ignore[assignment]
        self._wake()

    def _on_rewind(self, offset: int) -> None:
        """A full disk refused the appends from ``offset`` on: the next one starts there,
        and ``on_rewind`` (when set) hears of it before any later append is submitted."""
        self._next_offset = offset
        if self.on_rewind is not None:
            self.on_rewind(offset)

    def _on_durable(self, end: int) -> None:
        if self._on_group is not None:
            self._on_group(end - self._durable_seen)
        self._durable_seen = end
        self._wake()

    def _wake(self) -> None:
        event, self._advanced = self._advanced, None
        if event is not None:
            event.set()


def _remove_checkpoint(directory: Path, storage: Storage) -> None:
    with contextlib.suppress(FileNotFoundError):
        storage.unlink(filenames.checkpoint_file(directory))


async def _durable(fut: asyncio.Future[None], base: int, last: int) -> tuple[int, int]:
    await fut
    return base, last
