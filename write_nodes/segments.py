"""The segments of one partition, ordered by base offset (pure bookkeeping, no I/O)."""

from __future__ import annotations

from collections.abc import Iterator

from sortedcontainers import SortedDict

from vpq.write_nodes.segment import LogSegment


class LogSegments:
    """Sorted collection of :class:`LogSegment`; the last one is the active segment."""

    def __init__(self) -> None:
        self._by_base: SortedDict = SortedDict()

    def __len__(self) -> int:
        return len(self._by_base)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(list(self._by_base.values()))

    def add(self, segment: LogSegment) -> None:
        """Add a segment; its base offset must be new."""
        if segment.base_offset in self._by_base:
            raise ValueError(f"duplicate segment base offset {segment.base_offset}")
        self._by_base[segment.base_offset] = segment

    def remove(self, segment: LogSegment) -> None:
        del self._by_base[segment.base_offset]

    def get(self, base_offset: int) -> LogSegment | None:
        return self._by_base.get(base_offset)

    def floor(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset <= ``offset``, or ``None``."""
        i = self._by_base.bisect_right(offset) - 1
        if i < 0:
            return None
        return self._by_base.peekitem(i)[1]

    def after(self, segment: LogSegment) -> LogSegment | None:
        """The segment following ``segment``, or ``None`` for the last."""
        i = self._by_base.index(segment.base_offset) + 1
        if i >= len(self._by_base):
            return None
        return self._by_base.peekitem(i)[1]

    @property
    def first(self) -> LogSegment | None:
        return self._by_base.peekitem(0)[1] if self._by_base else None

    @property
    def active(self) -> LogSegment | None:
        return self._by_base.peekitem(-1)[1] if self._by_base else None

    def total_size(self) -> int:
        return sum(seg.size for seg in self._by_base.values())
