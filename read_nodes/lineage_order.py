"""Lineage order: may a record of a queue be handed to a group's delivery state now?

A group reads each physical partition (pp) its queue has lived in with one
cursor per pp (everything of the queue below the cursor has been ingested). A
virtual partition's lineage lists the pp ranges it lived in, oldest first; per
DESIGN.md a reader must finish range ``k`` (its cursor on that pp reached the
range's ``to_offset``) before it hands over any record of range ``k + 1``, so a
remap never reorders a key. ``LineageOrder.check`` applies that rule to one
record:

- ``INGEST``: the record lies in a range all of whose predecessors are finished,
  or its vp has no lineage at all (a vp that never moved: it lives in one pp);
- ``HOLD``: an earlier range of its vp is not finished yet; the caller stops
  that pp's cursor at this record and retries once other cursors moved;
- ``UNKNOWN``: the vp has a lineage but no range contains the record (the cached
  lineage is older than the record, e.g. a move just happened): hold it and
  reload the lineage.

Lineages are per vp under the queue's CURRENT V. A child vp whose lineage has
not been copied yet by a split uses its nearest ancestor's (``vp mod V/2``,
``vp mod V/4``, ...), which is the same history.

Why holding one pp's cursor cannot deadlock: a range is sealed at the old pp's
end offset before the vp's first record on the new pp is written, so a pp held
at offset ``a`` waits only for positions written before ``a``; a cycle of waits
would need a position written both before and after another.

Pure logic: no I/O.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol


class RangeLike(Protocol):
    """``metadata.maps.LineageRange`` and ``virtual_partitions.lineage.LineageRange`` both fit."""

    @property
    def pp(self) -> int: ...

    @property
    def from_offset(self) -> int: ...

    @property
    def to_offset(self) -> int | None: ...


class Decision(enum.Enum):
    INGEST = "ingest"
    HOLD = "hold"
    UNKNOWN = "unknown"


INGEST = Decision.INGEST


class LineageOrder:
    """The lineage of every vp of one queue (``vp -> ranges, oldest first``)."""

    __slots__ = ("_lineage", "_resolved", "_plain")

    def __init__(self, lineage: Mapping[int, Sequence[RangeLike]]) -> None:
        self._lineage: dict[int, tuple[RangeLike, ...]] = {int(vp): tuple(r) for vp, r in lineage.items() if r}
        self._resolved: dict[tuple[int, int], tuple[RangeLike, ...]] = {}
        self._plain: dict[tuple[int, int], tuple[int, frozenset[int]]] = {}

    def plain_vps(self, pp: int, virtual_partitions: int, from_offset: int) -> frozenset[int]:
        """Vps (under ``virtual_partitions``) of which ``check`` ingests every record of
        ``pp`` at or above ``from_offset``: those without a lineage, and those whose
        oldest range lies in ``pp``, open-ended, from ``from_offset`` or below. Empty
        when some such range starts above ``from_offset`` (then ask ``check``)."""
        key = (pp, virtual_partitions)
        found = self._plain.get(key)
        if found is None:
            vps = []
            start = 0
            for vp in range(virtual_partitions):
                ranges = self.ranges(vp, virtual_partitions)
                if not ranges:
                    vps.append(vp)
                    continue
                r = ranges[0]
                if r.pp == pp and r.to_offset is None:
                    vps.append(vp)
                    start = max(start, r.from_offset)
            found = self._plain[key] = (start, frozenset(vps))
        return found[1] if from_offset >= found[0] else frozenset()

    def ranges(self, vp: int, virtual_partitions: int) -> tuple[RangeLike, ...]:
        """The lineage of ``vp`` under ``virtual_partitions`` (an ancestor's when the
        vp has none of its own); empty when neither the vp nor an ancestor has one."""
        key = (vp, virtual_partitions)
        found = self._resolved.get(key)
        if found is not None:
            return found
        v = virtual_partitions
        out: tuple[RangeLike, ...] = ()
        while v >= 1:
            r = self._lineage.get(vp & (v - 1))
            if r is not None:
                out = r
                break
            v >>= 1
        self._resolved[key] = out
        return out

    def is_empty(self) -> bool:
        """True when no vp has a lineage (every record may be ingested as it comes)."""
        return not self._lineage

    def pps(self) -> set[int]:
        """Every pp some range of the queue lies in."""
        return {r.pp for ranges in self._lineage.values() for r in ranges}

    def first_offsets(self) -> dict[int, int]:
        """Per pp, the lowest ``from_offset`` of any range on it (where the queue's
        history starts in that pp)."""
        out: dict[int, int] = {}
        for ranges in self._lineage.values():
            for r in ranges:
                cur = out.get(r.pp)
                if cur is None or r.from_offset < cur:
                    out[r.pp] = r.from_offset
        return out

    def check(
        self, vp: int, virtual_partitions: int, pp: int, offset: int, cursor_of: Callable[[int], int]
    ) -> Decision:
        """May the record at ``(pp, offset)`` of ``vp`` be ingested now? ``cursor_of(pp)``
        is how far the group has ingested each pp (for the record's own pp: ``offset``)."""
        ranges = self._resolved.get((vp, virtual_partitions))
        if ranges is None:
            ranges = self.ranges(vp, virtual_partitions)
        if not ranges:
            return INGEST
        r = ranges[0]  # the oldest range (the only one of a vp that never moved): nothing before it
        to = r.to_offset
        if r.pp == pp and r.from_offset <= offset and (to is None or offset < to):
            return INGEST
        for k in range(1, len(ranges)):
            r = ranges[k]
            if r.pp == pp and r.from_offset <= offset and (r.to_offset is None or offset < r.to_offset):
                for earlier in ranges[:k]:
                    to = earlier.to_offset
                    if to is not None and cursor_of(earlier.pp) < to:
                        return Decision.HOLD
                return INGEST
        return Decision.UNKNOWN
