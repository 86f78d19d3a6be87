"""The timer index of delayed messages: which records of a group come due when.

A delayed message (``deliver_at_ms``, ``codec.system_headers``) is held here as
nothing but its due time and its offset, two 64-bit machine words in the sorted
``array`` chunks of its stream (one context of one pp, ``delivery_types.stream_of``):
about 17 bytes a message, no Python object per message. The record itself stays
in the log (and maybe the record cache) and is read again when it comes due.

Nothing here is persisted: the group's ack state keeps a delayed message
outstanding (it holds back the low watermark), so a successor re-reads it from
the log and puts it back here.

Order: ``take`` returns entries by ``(due_ms, stream, offset)``. ``add`` and
``discard`` cost ``O(log n + CHUNK)`` (a memmove inside one chunk), ``take``
``O(taken + streams)``.

Pure logic: no I/O, no clock.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable

MAX_OFFSET = (1 << 63) - 1
CHUNK = 1024
"""Entries of one chunk; a chunk twice as long is split in two."""

Due = tuple[int, int, int]
"""``(due_ms, stream, offset)`` of one delayed message."""


class _Stream:
    """The entries of one stream, sorted by ``(due, offset)``, in chunks of two arrays."""

    __slots__ = ("dues", "offs", "maxes", "size")

    def __init__(self) -> None:
        self.dues: list[array] = []
        self.offs: list[array] = []
        self.maxes: list[tuple[int, int]] = []  # last (due, offset) of each chunk
        self.size = 0

    def _find(self, due: int, offset: int) -> tuple[int, int, bool]:
        """``(chunk, position, present)`` of ``(due, offset)``: where it is or would go."""
        i = bisect_left(self.maxes, (due, offset))
        if i == len(self.maxes):
            i -= 1
        d, o = self.dues[i], self.offs[i]
        lo = bisect_left(d, due)
        hi = bisect_right(d, due, lo)
        j = bisect_left(o, offset, lo, hi)
        return i, j, j < hi and o[j] == offset

    def add(self, due: int, offset: int) -> bool:
        if not self.size:
            self.dues, self.offs = [array("q", [due])], [array("q", [offset])]
            self.maxes = [(due, offset)]
            self.size = 1
            return True
        i, j, present = self._find(due, offset)
        if present:
            return False
        d, o = self.dues[i], self.offs[i]
        d.insert(j, due)
        o.insert(j, offset)
        self.maxes[i] = (d[-1], o[-1])
        self.size += 1
        if len(d) >= 2 * CHUNK:
            self.dues[i:i + 1] = [d[:CHUNK], d[CHUNK:]]
            self.offs[i:i + 1] = [o[:CHUNK], o[CHUNK:]]
            self.maxes[i:i + 1] = [(d[CHUNK - 1], o[CHUNK - 1]), self.maxes[i]]
        return True

    def discard(self, due: int, offset: int) -> bool:
        if not self.size:
            return False
        i, j, present = self._find(due, offset)
        if not present:
            return False
        d, o = self.dues[i], self.offs[i]
        del d[j]
        del o[j]
        self.size -= 1
        if d:
            self.maxes[i] = (d[-1], o[-1])
        else:
            del self.dues[i], self.offs[i], self.maxes[i]
        return True

    def first_due(self) -> int:
        return self.dues[0][0]

    def peek(self, until_ms: int, limit: int) -> list[tuple[int, int]]:
        """The first entries, up to ``limit``, due at or before ``until_ms``."""
        out: list[tuple[int, int]] = []
        for d, o in zip(self.dues, self.offs):
            k = bisect_right(d, until_ms)
            k = min(k, limit - len(out))
            out.extend(zip(d[:k], o[:k]))
            if k < len(d) or len(out) >= limit:
                break
        return out

    def pop_front(self, n: int) -> None:
        self.size -= n
        while n:
            d, o = self.dues[0], self.offs[0]
            if n >= len(d):
                n -= len(d)
                del self.dues[0], self.offs[0], self.maxes[0]
            else:
                del d[:n]
                del o[:n]
                n = 0


class DelayIndex:
    """Delayed messages by stream (see the module docstring)."""

    __slots__ = ("_streams", "_size")

    def __init__(self) -> None:
        self._streams: dict[int, _Stream] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, stream: int, offset: int, due_ms: int) -> bool:
        """Hold ``offset`` of ``stream`` until ``due_ms``; False when it is held already."""
        if not 0 <= offset <= MAX_OFFSET:
            raise ValueError(f"offset {offset} does not fit the delay index")
        st = self._streams.get(stream)
        if st is None:
            st = self._streams[stream] = _Stream()
        if not st.add(due_ms, offset):
            return False
        self._size += 1
        return True

    def next_due(self, skip: Iterable[int] = ()) -> int | None:
        """The earliest due time held (streams in ``skip`` left out), None when empty."""
        skipped = set(skip) if skip else ()
        best = None
        for stream, st in self._streams.items():
            if stream in skipped:
                continue
            due = st.first_due()
            if best is None or due < best:
                best = due
        return best

    def take(self, until_ms: int, limit: int, skip: Iterable[int] = ()) -> list[Due]:
        """Remove and return up to ``limit`` entries due at or before ``until_ms``, by
        ``(due_ms, stream, offset)``; streams in ``skip`` are left alone."""
        skipped = set(skip) if skip else ()
        found: list[Due] = []  # each stream's first ``limit`` due: the earliest overall are among them
        for stream, st in self._streams.items():
            if stream in skipped or st.first_due() > until_ms:
                continue
            found.extend((due, stream, offset) for due, offset in st.peek(until_ms, limit))
        if not found:
            return []
        found.sort()
        out = found[:limit]
        taken: dict[int, int] = {}
        for _due, stream, _offset in out:
            taken[stream] = taken.get(stream, 0) + 1
        for stream, n in taken.items():  # what a stream gives is a prefix of its order
            st = self._streams[stream]
            st.pop_front(n)
            if not st.size:
                del self._streams[stream]
        self._size -= len(out)
        return out

    def discard(self, stream: int, offset: int, due_ms: int) -> bool:
        """Forget one entry; False when it was not held."""
        st = self._streams.get(stream)
        if st is None or not st.discard(due_ms, offset):
            return False
        if not st.size:
            del self._streams[stream]
        self._size -= 1
        return True

    def heads(self) -> dict[int, tuple[int, int]]:
        """Per stream, ``(due_ms, offset)`` of its earliest entry."""
        return {stream: (st.dues[0][0], st.offs[0][0]) for stream, st in self._streams.items()}

    def streams(self) -> dict[int, int]:
        """Entries held per stream."""
        return {stream: st.size for stream, st in self._streams.items()}
