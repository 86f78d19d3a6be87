"""``PendingOffsets``: the ack tracker's set of outstanding offsets of one stream. Pure, no I/O.

Every message a group ingests is added here and removed when it is acked, so during a
catch-up this is touched twice per message; acks come in runs of one key, spread over
the stream, not from its oldest end. A ``SortedList`` pays a bisect and a list deletion
for each removal; this keeps the members in a set (membership, count and removal in
O(1)) and, for order, a ``SortedList`` that may still hold removed offsets: removed ones
are dropped from its ends when the smallest or largest is asked for, and the whole
list is rebuilt without them once they outnumber the members (O(1) amortized a removal).

It offers the part of ``SortedList``'s interface the tracker uses, with set semantics
(an offset is held once): ``add``, ``update``, ``discard``, ``in``, ``len``, iteration in
ascending order, ``[0]`` (smallest), ``[-1]`` (largest) and ``irange``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sortedcontainers import SortedList

REBUILD_SLACK = 64
"""removed offsets tolerated in the order list beyond the members' count"""


class PendingOffsets:
    __slots__ = ("_live", "_order")

    def __init__(self, values: Iterable[int] = ()) -> None:
        self._live: set[int] = set()
        self._order: SortedList = SortedList()  # every member, and maybe removed offsets
        self.update(values)

    def __len__(self) -> int:
        return len(self._live)

    def __bool__(self) -> bool:
        return bool(self._live)

    def __contains__(self, value: object) -> bool:
        return value in self._live

    def add(self, value: int) -> None:
        live = self._live
        if value in live:
            return
        live.add(value)
        order = self._order
        if not order or value > order[-1] or value not in order:  # else it is there, removed before
            order.add(value)

    def update(self, values: Iterable[int]) -> None:
        for v in values:
            self.add(v)

    def discard(self, value: int) -> None:
        live = self._live
        if value in live:
            live.remove(value)
            self._compact()

    def discard_many(self, values: Iterable[int]) -> None:
        """``discard`` of each value."""
        live = self._live
        for v in values:
            live.discard(v)
        self._compact()

    def _compact(self) -> None:
        order = self._order
        if len(order) > 2 * len(self._live) + REBUILD_SLACK:
            live = self._live
            self._order = SortedList([v for v in order if v in live])

    def __getitem__(self, index: int) -> int:
        """The smallest (``0``) or largest (``-1``) member; IndexError when empty."""
        live = self._live
        if not live:
            raise IndexError("PendingOffsets is empty")
        order = self._order
        if index == 0:
            while order[0] not in live:
                del order[0]
            return order[0]
        if index == -1:
            while order[-1] not in live:
                del order[-1]
            return order[-1]
        raise IndexError(f"PendingOffsets offers [0] and [-1] only, not [{index}]")

    def __iter__(self) -> Iterator[int]:
        live = self._live
        return (v for v in self._order if v in live)

    def irange(
        self, minimum: int | None = None, maximum: int | None = None, inclusive: tuple[bool, bool] = (True, True)
    ) -> Iterator[int]:
        """The members between ``minimum`` and ``maximum`` (None: unbounded), ascending;
        ``inclusive`` as for ``SortedList.irange``."""
        live = self._live
        return (v for v in self._order.irange(minimum, maximum, inclusive) if v in live)
