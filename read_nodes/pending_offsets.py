"""``PendingOffsets``: the ack tracker's set of outstanding offsets of one stream. Pure, no I/O.

Every message a group ingests is added here and removed when it is acked, so during a
catch-up this is touched twice per message; acks come in runs of one key, spread over
the stream, not from its oldest end. A ``SortedList`` pays a bisect and a list deletion
for each removal; this keeps the members in a set (membership, count and removal in
O(1)) and a min-heap for the smallest one, which may still hold removed offsets:
they leave it when they reach its top, and the heap is rebuilt from the set once they
outnumber the members (O(log n) amortized an addition or removal, in C).

It offers the part of ``SortedList``'s interface the tracker uses, with set semantics
(an offset is held once): ``add``, ``update``, ``discard``, ``in``, ``len``, iteration in
ascending order, ``[0]`` (the smallest, O(1) amortized), ``[-1]`` (the largest, O(n))
and ``irange`` (O(n log n): it sorts; the tracker lists a state with it every persist).

Memory: about 50 bytes an offset (the set's slot and the heap's pointer) beyond the
int itself, against 8 for a ``SortedList``; the tracker holds one per message ingested
and not done, which ``max_unacked`` and the read-ahead bounds keep to tens of
thousands per group (deferred messages, which may be millions, are in ``OffsetSet``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from heapq import heapify, heappop, heappush

REBUILD_SLACK = 64
"""removed offsets tolerated in the heap beyond the members' count"""


class PendingOffsets:
    __slots__ = ("_live", "_heap")

    def __init__(self, values: Iterable[int] = ()) -> None:
        self._live: set[int] = set(values)
        self._heap: list[int] = list(self._live)  # every member, and maybe removed offsets
        heapify(self._heap)

    def __len__(self) -> int:
        return len(self._live)

    def __bool__(self) -> bool:
        return bool(self._live)

    def __contains__(self, value: object) -> bool:
        return value in self._live

    def add(self, value: int) -> None:
        live = self._live
        if value not in live:
            live.add(value)
            heappush(self._heap, value)  # a removed copy may still be in it: harmless

    def update(self, values: Iterable[int]) -> None:
        for v in values:
            self.add(v)

    def discard(self, value: int) -> None:
        live = self._live
        if value in live:
            live.remove(value)
            if len(self._heap) > 2 * len(live) + REBUILD_SLACK:
                self._rebuild()

    def discard_many(self, values: Iterable[int]) -> None:
        """``discard`` of each value."""
        live = self._live
        for v in values:
            live.discard(v)
        if len(self._heap) > 2 * len(live) + REBUILD_SLACK:
            self._rebuild()

    def _rebuild(self) -> None:
        self._heap = list(self._live)
        heapify(self._heap)

    def __getitem__(self, index: int) -> int:
        """The smallest (``0``) or largest (``-1``) member; IndexError when empty."""
        live = self._live
        if not live:
            raise IndexError("PendingOffsets is empty")
        if index == 0:
            heap = self._heap
            while heap[0] not in live:
                heappop(heap)
            return heap[0]
        if index == -1:
            return max(live)
        raise IndexError(f"PendingOffsets offers [0] and [-1] only, not [{index}]")

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._live))

    def irange(
        self, minimum: int | None = None, maximum: int | None = None, inclusive: tuple[bool, bool] = (True, True)
    ) -> Iterator[int]:
        """The members between ``minimum`` and ``maximum`` (None: unbounded), ascending;
        ``inclusive`` as for ``SortedList.irange``."""
        values = sorted(self._live)
        start = 0
        if minimum is not None:
            start = (bisect_left if inclusive[0] else bisect_right)(values, minimum)
        end = len(values)
        if maximum is not None:
            end = (bisect_right if inclusive[1] else bisect_left)(values, maximum)
        return iter(values[start:end])
