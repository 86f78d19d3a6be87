"""The timer index of delayed messages: which records of a group come due when.

A delayed message (``deliver_at_ms``, ``codec.system_headers``) is held here as
nothing but its due time and its position, packed into ONE int per message,
``due_ms << OFFSET_BITS | offset``, in a ``SortedList`` per stream (one context
of one pp, ``delivery_types.stream_of``). The record itself stays in the log
(and maybe the record cache) and is read again when it comes due. So a million
pending delayed messages cost a million ints (about 44 bytes each with the
list's pointer), whatever their size.

Nothing here is persisted: the group's ack state keeps a delayed message
outstanding (it holds back the low watermark), so a successor re-reads it from
the log and puts it back here.

Order: ``take`` returns entries by ``(due_ms, stream, offset)``. All operations are
``O(log n)`` per entry, plus ``O(streams)`` per call for the heads.

Pure logic: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from sortedcontainers import SortedList

OFFSET_BITS = 48
MAX_OFFSET = (1 << OFFSET_BITS) - 1
_OFFSET_MASK = MAX_OFFSET

Due = tuple[int, int, int]
"""``(due_ms, stream, offset)`` of one delayed message."""


class DelayIndex:
    """Delayed messages by stream, each as one packed int (see the module docstring)."""

    __slots__ = ("_streams", "_size")

    def __init__(self) -> None:
        self._streams: dict[int, SortedList] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @staticmethod
    def _pack(due_ms: int, offset: int) -> int:
        if not 0 <= offset <= MAX_OFFSET:
            raise ValueError(f"offset {offset} does not fit the delay index ({OFFSET_BITS} bits)")
        return (max(due_ms, 0) << OFFSET_BITS) | offset

    def add(self, stream: int, offset: int, due_ms: int) -> bool:
        """Hold ``offset`` of ``stream`` until ``due_ms``; False when it is held already."""
        packed = self._pack(due_ms, offset)
        sl = self._streams.get(stream)
        if sl is None:
            sl = self._streams[stream] = SortedList()
        elif packed in sl:
            return False
        sl.add(packed)
        self._size += 1
        return True

    def next_due(self, skip: Iterable[int] = ()) -> int | None:
        """The earliest due time held (streams in ``skip`` left out), None when empty."""
        skipped = set(skip) if skip else ()
        best = None
        for stream, sl in self._streams.items():
            if stream in skipped:
                continue
            due = sl[0] >> OFFSET_BITS
            if best is None or due < best:
                best = due
        return best

    def take(self, until_ms: int, limit: int, skip: Iterable[int] = ()) -> list[Due]:
        """Remove and return up to ``limit`` entries due at or before ``until_ms``, by
        ``(due_ms, stream, offset)``; streams in ``skip`` are left alone."""
        skipped = set(skip) if skip else ()
        bound = (until_ms + 1) << OFFSET_BITS
        found: list[tuple[int, int]] = []  # (packed, stream): each stream's first ``limit`` due
        for stream, sl in self._streams.items():
            if stream in skipped or sl[0] >= bound:
                continue
            for i, packed in enumerate(sl.irange(maximum=bound, inclusive=(True, False))):
                if i >= limit:
                    break
                found.append((packed, stream))
        if not found:
            return []
        found.sort(key=lambda ps: (ps[0] >> OFFSET_BITS, ps[1], ps[0] & _OFFSET_MASK))
        out: list[Due] = []
        for packed, stream in found[:limit]:
            sl = self._streams[stream]
            sl.remove(packed)
            if not sl:
                del self._streams[stream]
            out.append((packed >> OFFSET_BITS, stream, packed & _OFFSET_MASK))
        self._size -= len(out)
        return out

    def discard(self, stream: int, offset: int, due_ms: int) -> bool:
        """Forget one entry; False when it was not held."""
        sl = self._streams.get(stream)
        packed = self._pack(due_ms, offset)
        if sl is None or packed not in sl:
            return False
        sl.remove(packed)
        if not sl:
            del self._streams[stream]
        self._size -= 1
        return True

    def streams(self) -> dict[int, int]:
        """Entries held per stream."""
        return {stream: len(sl) for stream, sl in self._streams.items()}
