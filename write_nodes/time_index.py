"""Sparse time index of one segment: (max timestamp so far, offset). Pure (no I/O).

An entry (t, o) says: among the batches of this segment up to and including the
batch starting at offset ``o``, the largest timestamp is ``t``. Entries are only
added when ``t`` grows, so timestamps and offsets both increase. To find the
first record with timestamp >= T, start scanning at the offset of the last entry
with t < T (every batch up to it is older than T), or at the segment start.

On disk: entries of 12 bytes, ``>qI`` = (timestamp ms, offset - base_offset).
"""

from __future__ import annotations

import struct
from bisect import bisect_left

from vpq.write_nodes.offset_index import MAX_RELATIVE, CorruptIndexError

ENTRY = struct.Struct(">qI")


class TimeIndex:
    __slots__ = ("base_offset", "_timestamps", "_offsets")

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self._timestamps: list[int] = []
        self._offsets: list[int] = []

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def max_timestamp(self) -> int | None:
        """Largest timestamp recorded, ``None`` when empty."""
        return self._timestamps[-1] if self._timestamps else None

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Record (timestamp, offset) if ``timestamp`` is larger than the last entry's
        (and ``offset`` not smaller). Returns whether an entry was added."""
        if self._timestamps and (timestamp <= self._timestamps[-1] or offset < self._offsets[-1]):
            return False
        rel = offset - self.base_offset
        if not 0 <= rel <= MAX_RELATIVE:
            raise ValueError(f"time index offset {offset} out of range for base {self.base_offset}")
        if self._offsets and offset == self._offsets[-1]:
            self._timestamps[-1] = timestamp
            return True
        self._timestamps.append(timestamp)
        self._offsets.append(offset)
        return True

    def last(self) -> tuple[int, int, int]:
        """``(entries, last timestamp, last offset)`` (-1s when empty), for ``rewind``."""
        if not self._timestamps:
            return 0, -1, -1
        return len(self._timestamps), self._timestamps[-1], self._offsets[-1]

    def rewind(self, last: tuple[int, int, int]) -> None:
        """Back to the state ``last()`` described (an append that was never written)."""
        n, ts, off = last
        del self._timestamps[n:]
        del self._offsets[n:]
        if n:
            self._timestamps[-1] = ts
            self._offsets[-1] = off

    def scan_start(self, timestamp: int) -> int:
        """Offset from which to scan for the first record with timestamp >= ``timestamp``."""
        i = bisect_left(self._timestamps, timestamp) - 1
        return self._offsets[i] if i >= 0 else self.base_offset

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._timestamps, self._offsets))

    def to_bytes(self) -> bytes:
        base = self.base_offset
        return b"".join(ENTRY.pack(t, o - base) for t, o in zip(self._timestamps, self._offsets))

    @classmethod
    def from_bytes(cls, base_offset: int, data: bytes, end_offset: int) -> TimeIndex:
        """Parse and sanity-check: whole entries, increasing, offsets below ``end_offset``."""
        if len(data) % ENTRY.size:
            raise CorruptIndexError(f"time index size {len(data)} is not a multiple of {ENTRY.size}")
        index = cls(base_offset)
        for ts, rel in ENTRY.iter_unpack(data):
            offset = base_offset + rel
            if offset >= end_offset:
                raise CorruptIndexError(f"time index offset {offset} beyond segment end {end_offset}")
            if index._timestamps and (ts <= index._timestamps[-1] or offset <= index._offsets[-1]):
                raise CorruptIndexError("time index entries not increasing")
            index._timestamps.append(ts)
            index._offsets.append(offset)
        return index
