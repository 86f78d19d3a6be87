"""Places appended batches into segments: the partition log's commit sink.

:class:`SegmentAppender` implements :class:`~write_nodes.group_commit.CommitSink`.
On the event-loop thread, in offset order, it places each batch at the end of the
active segment (rolling to a new segment by ``segment_bytes`` / ``segment_ms``)
and updates the sparse indexes; the committer's I/O thread then writes and
fsyncs. When a group completes, the appender moves the readable end
(``durable_end``) and, after an fsync, the ``synced_end`` used for the
recovery-point checkpoint.

Durability rules kept here:
- on roll, the old segment's index files are written and fsynced before the new
  segment's first bytes, and the op creating the new file carries the directory
  fd so the next synced group makes the new name (and the index renames) durable;
- under a non-``group`` policy a segment is *dirty* while it holds unsynced bytes;
  :meth:`prepare_sync` fsyncs every dirty segment (and the directory if needed);
- ``pending_io`` pins the segments a queued op touches so retention never closes
  a file under the I/O thread.

A full disk (``rollback``): the ops were not written (the committer truncated the
file back); the segment's bookkeeping goes back to its state before the first of
them and ``on_rewind(base_offset)`` tells the log where the next append starts.
Ops that rolled a segment are not rolled back (False: the log goes offline and
recovery repairs it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vpq.config.settings import LogSettings
from vpq.write_nodes.errors import LogIOError
from vpq.write_nodes.group_commit import FsyncFn, WriteOp
from vpq.write_nodes.segment import Bookmark, LogSegment
from vpq.write_nodes.segments import LogSegments


@dataclass(frozen=True, slots=True)
class AppendMeta:
    """What the log tells the appender about one submitted batch."""

    base_offset: int
    next_offset: int
    max_timestamp: int


@dataclass(slots=True)
class _OpContext:
    segment: LogSegment | None  # the segment written (None for a sync-only op)
    size: int  # segment size after this op
    end_offset: int  # next offset after this op
    pinned: list[LogSegment] = field(default_factory=list)
    base_offset: int = -1  # first offset of this op's batch
    mark: Bookmark | None = None  # the segment's bookkeeping before this op
    rolled: bool = False  # this op created a new segment


class SegmentAppender:
    """Lays batches out in segments and tracks how far they are written and synced."""

    def __init__(
        self,
        directory: Path,
        segments: LogSegments,
        settings: LogSettings,
        dir_fd: int,
        clock_ms: Callable[[], int],
        on_durable: Callable[[int], None],
        on_failed: Callable[[LogIOError], None],
        on_rewind: Callable[[int], None] = lambda _offset: None,
    ) -> None:
        active = segments.active
        if active is None:
            raise ValueError("a log has at least one segment")
        self._directory = directory
        self._segments = segments
        self._settings = settings
        self._dir_fd = dir_fd
        self._clock_ms = clock_ms
        self._on_durable = on_durable
        self._on_failed = on_failed
        self._on_rewind = on_rewind
        self._dirty: dict[LogSegment, None] = {}
        self._dir_dirty = False
        self.planned_end = active.next_offset
        self.durable_end = active.next_offset
        self.synced_end = active.next_offset
        self.rolls = 0

    # ------------------------------------------------------------- CommitSink
    def prepare(self, data: bytes, meta: object, sync: bool) -> WriteOp:
        assert isinstance(meta, AppendMeta)
        seg = self._segments.active
        assert seg is not None
        nbytes = len(data)
        before: list[Callable[[FsyncFn], object]] = []
        pinned: list[LogSegment] = []
        rolled = False
        if seg.size and self._should_roll(seg, meta, nbytes):
            rolled = True
            seg.seal_time_index()
            before.append(_index_writer(seg))
            pinned.append(seg)
            seg = LogSegment.create(
                self._directory, meta.base_offset, self._settings.index_interval_bytes, self._clock_ms(), seg.storage
            )
            self._segments.add(seg)
            self._dir_dirty = True
            self.rolls += 1
        mark = seg.bookmark()
        position = seg.track_append(meta.base_offset, meta.next_offset, meta.max_timestamp, nbytes)
        pinned.append(seg)
        for p in pinned:
            p.pending_io += 1
        sync_fds: tuple[int, ...] = (seg.fd,)
        if self._dir_dirty:
            sync_fds = (seg.fd, self._dir_fd)
            if sync:
                self._dir_dirty = False
        if not sync:
            self._dirty[seg] = None
        self.planned_end = meta.next_offset
        ctx = _OpContext(seg, seg.size, meta.next_offset, pinned, meta.base_offset, mark, rolled)
        return WriteOp(fd=seg.fd, data=data, position=position, before=before, sync_fds=sync_fds, context=ctx)

    def prepare_sync(self) -> WriteOp | None:
        if not self._dirty and not self._dir_dirty:
            return None
        fds = [seg.fd for seg in self._dirty]
        pinned = list(self._dirty)
        self._dirty.clear()
        if self._dir_dirty:
            fds.append(self._dir_fd)
            self._dir_dirty = False
        for p in pinned:
            p.pending_io += 1
        ctx = _OpContext(None, 0, self.planned_end, pinned)
        return WriteOp(sync_fds=tuple(fds), context=ctx)

    def finish(self, ops: list[WriteOp], synced: bool) -> None:
        end = -1
        for op in ops:
            ctx = op.context
            assert isinstance(ctx, _OpContext)
            if ctx.segment is not None:
                ctx.segment.mark_durable(ctx.size)
                end = ctx.end_offset
            for p in ctx.pinned:
                p.pending_io -= 1
            if synced and ctx.end_offset > self.synced_end:
                self.synced_end = ctx.end_offset
        if end > self.durable_end:
            self.durable_end = end
            self._on_durable(end)

    def failed(self, error: LogIOError) -> None:
        self._on_failed(error)

    def rollback(self, ops: list[WriteOp]) -> bool:
        contexts = [op.context for op in ops]
        for ctx in contexts:
            assert isinstance(ctx, _OpContext)
            for p in ctx.pinned:
                p.pending_io -= 1
        written = [ctx for ctx in contexts if isinstance(ctx, _OpContext) and ctx.segment is not None]
        if any(ctx.rolled for ctx in written):
            return False
        if written:
            first = written[0]
            assert first.segment is not None and first.mark is not None
            first.segment.rewind(first.mark)
            self.planned_end = first.base_offset
            self._on_rewind(first.base_offset)
        return True

    def skipped_to(self, offset: int) -> None:
        """The log continues at ``offset`` (``PartitionLog.skip_to``: nothing pending, the
        active segment's end marker durable)."""
        self.planned_end = self.durable_end = self.synced_end = offset

    # ------------------------------------------------------------------ inner
    def _should_roll(self, seg: LogSegment, meta: AppendMeta, nbytes: int) -> bool:
        s = self._settings
        return (
            seg.size + nbytes > s.segment_bytes
            or self._clock_ms() - seg.created_ms >= s.segment_ms
            or not seg.fits(meta.next_offset - meta.base_offset, nbytes)
        )

    def is_dirty(self, seg: LogSegment) -> bool:
        return seg in self._dirty


def _index_writer(seg: LogSegment) -> Callable[[FsyncFn], object]:
    def op(fsync: FsyncFn) -> object:
        return seg.write_indexes(fsync)

    return op
