"""Retention planning: which of the oldest segments to delete. Pure (no I/O, no clock).

Whole segments only, oldest first, and never past the first segment that may not
be deleted (the active one, or one with I/O in flight). A segment goes when
- ``retention_ms >= 0`` and its newest record is older than ``now_ms - retention_ms``, or
- ``retention_bytes >= 0`` and the partition stays at or above ``retention_bytes``
  without it (Kafka's rule: delete while size - retention_bytes >= segment size).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base_offset: int
    size: int
    max_timestamp: int
    deletable: bool


def segments_to_delete(
    segments: Sequence[SegmentInfo], now_ms: int, retention_bytes: int, retention_ms: int
) -> int:
    """How many leading segments of ``segments`` (oldest first) retention removes."""
    excess = sum(s.size for s in segments) - retention_bytes if retention_bytes >= 0 else -1
    count = 0
    for seg in segments:
        if not seg.deletable:
            break
        too_old = retention_ms >= 0 and now_ms - seg.max_timestamp > retention_ms
        too_big = retention_bytes >= 0 and excess - seg.size >= 0
        if not (too_old or too_big):
            break
        excess -= seg.size
        count += 1
    return count
