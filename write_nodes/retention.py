"""Retention planning: which of the oldest segments to delete, and which records are
dead for compaction. Pure (no I/O, no clock).

Whole segments only, oldest first, and never past the first segment that may not
be deleted (the active one, or one with I/O in flight). A segment goes when
- ``retention_ms >= 0`` and its newest record is older than ``now_ms - retention_ms``, or
- it is empty (compaction left nothing in it), or
- ``retention_bytes >= 0`` and the partition stays at or above ``retention_bytes``
  without it (Kafka's rule: delete while size - retention_bytes >= segment size),
and (``SegmentInfo.queues_past``) every queue with records in it lets it go
(:meth:`QueuePolicy.queues_past`: a queue with a ``retention_ms`` of its own keeps
the segment while its newest record there is younger than that).

:class:`QueuePolicy` also says which records compaction may drop: records of a
deleted queue, and records older than their queue's retention (or, for a queue
without one, than the log's ``retention_ms``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base_offset: int
    size: int
    max_timestamp: int
    deletable: bool
    queues_past: bool = True


def segments_to_delete(
    segments: Sequence[SegmentInfo], now_ms: int, retention_bytes: int, retention_ms: int
) -> int:
    """How many leading segments of ``segments`` (oldest first) retention removes."""
    excess = sum(s.size for s in segments) - retention_bytes if retention_bytes >= 0 else -1
    count = 0
    for seg in segments:
        if not seg.deletable or not seg.queues_past:
            break
        too_old = retention_ms >= 0 and now_ms - seg.max_timestamp > retention_ms
        too_big = retention_bytes >= 0 and excess - seg.size >= 0
        if not (too_old or too_big or seg.size == 0):
            break
        excess -= seg.size
        count += 1
    return count


# ------------------------------------------------------------------ per-queue retention
DELETED = -2
"""``QueuePolicy.retention_of`` of a queue that no longer exists."""
FOREVER = -1


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """What the write node knows of the queues whose records share its partitions.

    ``retention`` maps every live queue id to its ``retention_ms`` (``-1``: no limit
    of its own, the log's ``retention_ms`` applies). Queue ids are never reused, so an
    id at or below ``known_below`` that ``retention`` lacks belongs to a deleted queue;
    a larger id is one created after the snapshot and counts as live with no limit.
    ``log_retention_ms`` is the log's own time limit (``-1`` = forever)."""

    retention: Mapping[int, int]
    known_below: int
    log_retention_ms: int = -1

    def retention_of(self, queue_id: int) -> int:
        """The queue's retention in ms, ``FOREVER``, or ``DELETED``."""
        r = self.retention.get(queue_id)
        if r is not None:
            return r if r > 0 else FOREVER
        return DELETED if queue_id <= self.known_below else FOREVER

    def effective_ms(self, queue_id: int) -> int:
        """The age past which a record of the queue is dead (``DELETED``: always dead,
        ``FOREVER``: never): its own retention, else the log's."""
        r = self.retention_of(queue_id)
        if r == FOREVER:
            return self.log_retention_ms if self.log_retention_ms >= 0 else FOREVER
        return r

    def dead(self, queue_id: int, timestamp_ms: int, now_ms: int) -> bool:
        """Whether a record of ``queue_id`` with ``timestamp_ms`` may be removed now."""
        r = self.effective_ms(queue_id)
        return r == DELETED or (r != FOREVER and now_ms - timestamp_ms > r)

    def queues_past(self, newest_by_queue: Mapping[int, int], now_ms: int) -> bool:
        """Whether every queue with records in a segment (queue id -> its newest record's
        timestamp there) lets the segment go: deleted, past its own retention, or with no
        retention of its own (then the log's limits alone decide)."""
        for qid, newest in newest_by_queue.items():
            r = self.retention_of(qid)
            if r == DELETED or r == FOREVER:
                continue
            if now_ms - newest <= r:
                return False
        return True
