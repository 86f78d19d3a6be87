"""Where a group's parked keys wait in the log: per key, the segments of streams
that hold its records not yet handed to the delivery state, in key order.

A key (context id, key hash) is parked when its read-ahead is full (see
``read_nodes.delivery``); from then on every later record of it, in any
stream, is left in the log. A *segment* ``(stream, from_offset, until)`` covers
the key's records in one stream from ``from_offset`` on, below ``until`` when
the segment is closed (the key's later records were met in another stream
first) or below the stream's cursor while it is open (the last one). A refill
hands the first segment's records over in offset order, then the next
segment's: the order in which the cursors met them, which lineage order makes
the key's order.

Pure logic: no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

ParkKey = tuple[int, int]


@dataclass(slots=True)
class Segment:
    id: int
    stream: int
    from_offset: int
    until: int | None = None


class ParkedKeys:
    """The segments of every parked key of one group."""

    __slots__ = ("_keys", "_next_id")

    def __init__(self) -> None:
        self._keys: dict[ParkKey, deque[Segment]] = {}
        self._next_id = 1

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: ParkKey) -> bool:
        return key in self._keys

    def keys(self) -> list[ParkKey]:
        return list(self._keys)

    def covers(self, key: ParkKey, stream: int) -> bool:
        """True when the key's open segment is in ``stream`` (a record of the key met
        there by the cursor belongs to it)."""
        segs = self._keys.get(key)
        return bool(segs) and segs[-1].stream == stream and segs[-1].until is None

    def add(self, key: ParkKey, stream: int, from_offset: int, close_at: int | None) -> tuple[Segment, Segment | None]:
        """Open a segment of ``key`` in ``stream`` at ``from_offset``. The key's open
        segment elsewhere, if any, is closed at ``close_at`` (its stream's cursor).
        Returns the new segment and the one it closed."""
        segs = self._keys.setdefault(key, deque())
        closed = None
        if segs and segs[-1].until is None:
            closed = segs[-1]
            closed.until = close_at if close_at is not None else closed.from_offset
        seg = Segment(self._next_id, stream, from_offset)
        self._next_id += 1
        segs.append(seg)
        return seg, closed

    def first(self, key: ParkKey) -> Segment | None:
        segs = self._keys.get(key)
        return segs[0] if segs else None

    def pop_first(self, key: ParkKey) -> bool:
        """Drop the key's first segment; True when it has none left (it is unparked)."""
        segs = self._keys[key]
        segs.popleft()
        if not segs:
            del self._keys[key]
            return True
        return False

    def lowest(self, stream: int) -> int | None:
        """The lowest ``from_offset`` of any segment in ``stream`` (the index must keep
        the entries from there)."""
        low = None
        for segs in self._keys.values():
            for seg in segs:
                if seg.stream == stream and (low is None or seg.from_offset < low):
                    low = seg.from_offset
        return low
