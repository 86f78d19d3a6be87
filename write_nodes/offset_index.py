"""Sparse offset index of one segment: offset -> byte position of the batch
starting at that offset. Pure (no I/O): the segment loads and stores the bytes.

An entry is added at most every ``index_interval_bytes`` of log data, so a
lookup gives the floor entry and the reader scans a few batches forward. The
index is a cache: it can always be rebuilt by scanning the segment, and a file
that fails :meth:`OffsetIndex.from_bytes`'s sanity checks is rebuilt.

On disk: entries of 8 bytes, ``>II`` = (offset - base_offset, position), both
strictly increasing.
"""

from __future__ import annotations

import struct
from bisect import bisect_right

ENTRY = struct.Struct(">II")
MAX_RELATIVE = (1 << 32) - 1


class CorruptIndexError(ValueError):
    """Index bytes that fail the sanity checks; rebuild the index from the segment."""


class OffsetIndex:
    """Floor lookup of offsets in a segment starting at ``base_offset``."""

    __slots__ = ("base_offset", "_offsets", "_positions")

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self._offsets: list[int] = []
        self._positions: list[int] = []

    def __len__(self) -> int:
        return len(self._offsets)

    def append(self, offset: int, position: int) -> None:
        """Add an entry; both must be larger than the last entry's and fit the format."""
        rel = offset - self.base_offset
        if not 0 <= rel <= MAX_RELATIVE or not 0 <= position <= MAX_RELATIVE:
            raise ValueError(f"index entry ({offset}, {position}) out of range for base {self.base_offset}")
        if self._offsets and (offset <= self._offsets[-1] or position <= self._positions[-1]):
            raise ValueError(f"index entry ({offset}, {position}) not after ({self._offsets[-1]}, {self._positions[-1]})")
        self._offsets.append(offset)
        self._positions.append(position)

    def truncate_entries(self, n: int) -> None:
        """Keep only the first ``n`` entries."""
        del self._offsets[n:]
        del self._positions[n:]

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry with entry offset <= ``offset`` as (offset, position);
        (base_offset, 0) when there is none."""
        i = bisect_right(self._offsets, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._offsets[i], self._positions[i]

    def last_entry(self) -> tuple[int, int]:
        """The last entry, or (base_offset, 0) when empty."""
        if not self._offsets:
            return self.base_offset, 0
        return self._offsets[-1], self._positions[-1]

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions))

    def to_bytes(self) -> bytes:
        base = self.base_offset
        return b"".join(ENTRY.pack(o - base, p) for o, p in zip(self._offsets, self._positions))

    @classmethod
    def from_bytes(cls, base_offset: int, data: bytes, segment_size: int) -> OffsetIndex:
        """Parse and sanity-check an index file's bytes: whole entries, strictly
        increasing, every position inside a segment of ``segment_size`` bytes.
        ``CorruptIndexError`` otherwise."""
        if len(data) % ENTRY.size:
            raise CorruptIndexError(f"index size {len(data)} is not a multiple of {ENTRY.size}")
        index = cls(base_offset)
        for rel, pos in ENTRY.iter_unpack(data):
            if pos >= segment_size:
                raise CorruptIndexError(f"position {pos} beyond segment size {segment_size}")
            try:
                index.append(base_offset + rel, pos)
            except ValueError as exc:
                raise CorruptIndexError(str(exc)) from exc
        return index
