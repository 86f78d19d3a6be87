"""Compaction and queue-aware retention of a ``PartitionLog`` (the log's mixin).

``PartitionLog`` inherits :class:`LogCompaction`; see ``write_nodes.log``'s contract
(``compact``, ``apply_retention``) and ``write_nodes.compaction`` (one segment). This
part decides which sealed segments to summarise and rewrite, runs that on executor
threads (a cancelled caller still waits for the thread, which uses the segment's
file), and swaps the rewritten segment in on the loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from vpq.codec.errors import CorruptBatchError
from vpq.write_nodes.compaction import CompactionAbandoned, CompactResult, SegmentSummary, compact_segment, summarize
from vpq.write_nodes.retention import QueuePolicy
from vpq.write_nodes.segment import LogSegment

if TYPE_CHECKING:
    from vpq.config.settings import LogSettings
    from vpq.write_nodes.appender import SegmentAppender
    from vpq.write_nodes.errors import PartitionOfflineError
    from vpq.write_nodes.segments import LogSegments

log = logging.getLogger(__name__)
_T = TypeVar("_T")


@dataclass(slots=True)
class CompactionPass:
    """What one ``compact`` call did."""

    segments: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


@dataclass(slots=True)
class CompactionTotals:
    """Every compaction of this log since it was created (for metrics)."""

    passes: int = 0
    segments: int = 0
    bytes_reclaimed: int = 0

    def add(self, done: CompactionPass) -> None:
        self.passes += 1
        self.segments += done.segments
        self.bytes_reclaimed += done.bytes_before - done.bytes_after


async def _finish_in_thread(fn: Callable[..., _T], *args: object) -> _T:
    """``fn(*args)`` on an executor thread; a cancelled caller still waits for the
    thread to finish (it may be using files the caller is about to close)."""
    fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await fut
        raise


class LogCompaction:
    """The compaction half of ``PartitionLog`` (which provides these attributes)."""

    settings: LogSettings
    partition_id: int
    _segments: LogSegments
    _appender: SegmentAppender | None
    _checkpointed: int | None
    _running: bool
    _clock_ms: Callable[[], int]
    _compaction_lock: asyncio.Lock
    _policy: QueuePolicy | None
    _summaries: dict[int, SegmentSummary]
    compactions: CompactionTotals

    if TYPE_CHECKING:  # PartitionLog's

        @property
        def online(self) -> bool: ...

        def _check_online(self) -> None: ...

        def _fail(self, exc: OSError) -> PartitionOfflineError: ...

    def _queues_past(self, seg: LogSegment, now_ms: int) -> bool:
        policy = self._policy
        if policy is None or seg.size == 0:
            return True
        summary = self._summaries.get(seg.base_offset)
        if summary is None or summary.size != seg.size:
            return False  # not read yet: keep it until the next compaction pass says
        return policy.queues_past(summary.newest_by_queue(), now_ms)

    async def compact(self, policy: QueuePolicy, now_ms: int | None = None) -> CompactionPass:
        """Remember ``policy`` (with the log's own ``retention_ms``; retention uses it from
        now on) and compact every sealed
        segment below the recovery point whose dead bytes under it reach
        ``settings.compaction_min_dead_ratio`` of its size (or that holds only dead
        records). Appends and reads go on meanwhile. A compaction stopped by an
        ``OSError`` before it replaced anything (a full disk) is skipped with a warning;
        a later ``OSError`` takes the partition offline (reopening recovers)."""
        async with self._compaction_lock:
            self._check_online()
            policy = dataclasses.replace(policy, log_retention_ms=self.settings.retention_ms)
            self._policy = policy
            now = self._clock_ms() if now_ms is None else now_ms
            done = CompactionPass()
            for seg in self._compactable():
                if not self.online:
                    break
                if self._segments.get(seg.base_offset) is not seg or seg.pending_io:
                    continue  # deleted by retention (or busy) while an earlier one was compacted
                summary = await self._summary(seg)
                if summary is None:
                    continue
                dead = summary.dead_bytes(policy, now)
                ratio = self.settings.compaction_min_dead_ratio
                if seg.size == 0 or not summary.any_dead(policy, now) or (dead < ratio * seg.size and dead < seg.size):
                    continue
                result = await self._rewrite(seg, policy, now)
                if result is not None:
                    done.segments += 1
                    done.bytes_before += result.bytes_before
                    done.bytes_after += result.bytes_after
            self.compactions.add(done)
            return done

    def _compactable(self) -> list[LogSegment]:
        """Sealed segments wholly below the checkpointed recovery point, idle."""
        assert self._appender is not None
        point = self._checkpointed or 0
        segs = list(self._segments)
        out = []
        for seg, nxt in zip(segs, segs[1:]):
            if nxt.base_offset <= point and seg.pending_io == 0 and not self._appender.is_dirty(seg):
                out.append(seg)
        return out

    async def _summary(self, seg: LogSegment) -> SegmentSummary | None:
        summary = self._summaries.get(seg.base_offset)
        if summary is not None and summary.size == seg.size:
            return summary
        seg.pending_io += 1
        try:
            summary = await _finish_in_thread(
                summarize, seg, seg.size, self.settings.compaction_max_bytes_per_s, self.settings.compaction_duty_cycle
            )
        except CorruptBatchError as exc:
            log.error("partition %d: segment %d not compacted: %s", self.partition_id, seg.base_offset, exc)
            return None
        except OSError as exc:
            raise self._fail(exc) from exc
        finally:
            seg.pending_io -= 1
        if self._segments.get(seg.base_offset) is not seg:
            return None
        self._summaries[seg.base_offset] = summary
        return summary

    async def _rewrite(self, seg: LogSegment, policy: QueuePolicy, now: int) -> CompactResult | None:
        seg.pending_io += 1
        cancelled = False
        fut = asyncio.get_running_loop().run_in_executor(
            None, compact_segment, seg, policy, now, self.settings.compaction_max_bytes_per_s,
            self.settings.compaction_duty_cycle,
        )
        try:
            try:
                result = await asyncio.shield(fut)
            except asyncio.CancelledError:
                cancelled = True  # the thread still uses the segment: let it finish, swap, then go
                result = await fut
        except CompactionAbandoned as exc:
            log.warning("partition %d: compaction of segment %d abandoned: %s", self.partition_id, seg.base_offset, exc)
            return None
        except OSError as exc:
            raise self._fail(exc) from exc
        finally:
            seg.pending_io -= 1
        self._swap(seg, result)
        if cancelled:
            raise asyncio.CancelledError
        return result

    def _swap(self, seg: LogSegment, result: CompactResult) -> None:
        """Serve the compacted segment instead of ``seg`` (loop thread, no await)."""
        self._segments.remove(seg)
        self._segments.add(result.segment)
        self._summaries[seg.base_offset] = result.summary
        with contextlib.suppress(OSError):
            seg.close()  # its inode (the old data) goes with this last descriptor
