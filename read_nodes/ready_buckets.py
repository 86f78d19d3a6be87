"""Ready messages of one group, bucketed by (message isolation context, vp).

Every item here is deliverable right now to whichever consumer the routing rule
and the assignment point at: the owner of the item's vp in the context its
message context routes to. Items blocked by per-key order are NOT here (the
delivery state adds a key's next message only when the key has no run out), so
taking never has to skip anything. An item may stand for a run of messages
(``take``'s ``weigh``).

``vps=None`` means every vp: an idle consumer stealing work (see
``read_nodes.delivery``) looks at every bucket of the contexts it may serve.

Within a bucket, items come out by ``(priority, seq)``, lowest first: the caller
ranks them (``GroupDelivery``: message priority, then redelivery before first
delivery), then ingestion order. ``take`` merges the buckets a
consumer can see with a heap over their heads, so a poll costs
``O(b + k log b)`` for ``k`` items taken from ``b`` non-empty visible buckets,
independent of the backlog. Push and pop are ``O(log bucket size)``.

Pure logic: no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable
from collections.abc import Set as AbstractSet
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")

REDELIVERY = 0
FIRST_DELIVERY = 1


class ReadyBuckets(Generic[K, T]):
    """Heaps of ready items keyed by ``(ctx, vp)``, with the non-empty vps per ctx."""

    __slots__ = ("_heaps", "_vps", "_size")

    def __init__(self) -> None:
        self._heaps: dict[tuple[K, int], list[tuple[int, int, T]]] = {}
        self._vps: dict[K, set[int]] = {}
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def push(self, ctx: K, vp: int, priority: int, seq: int, item: T) -> None:
        """Add a ready item; ``seq`` must be unique among items present."""
        key = (ctx, vp)
        heap = self._heaps.get(key)
        if heap is None:
            heap = self._heaps[key] = []
            self._vps.setdefault(ctx, set()).add(vp)
        heapq.heappush(heap, (priority, seq, item))
        self._size += 1

    def _visible(self, sources: Iterable[K], vps: AbstractSet[int] | None) -> Iterable[tuple[K, int]]:
        for ctx in sources:
            nonempty = self._vps.get(ctx)
            if not nonempty:
                continue
            if vps is None:
                for vp in nonempty:
                    yield ctx, vp
            elif len(nonempty) <= len(vps):
                for vp in nonempty:
                    if vp in vps:
                        yield ctx, vp
            else:
                for vp in vps:
                    if vp in nonempty:
                        yield ctx, vp

    def any_for(self, sources: Iterable[K], vps: AbstractSet[int] | None) -> bool:
        """True when ``take(sources, vps, 1)`` would return an item."""
        return next(iter(self._visible(sources, vps)), None) is not None

    def count_for(self, sources: Iterable[K], vps: AbstractSet[int] | None) -> int:
        """Number of items ``take`` could return (O(visible buckets))."""
        return sum(len(self._heaps[key]) for key in self._visible(sources, vps))

    def take(
        self, sources: Iterable[K], vps: AbstractSet[int] | None, limit: int,
        weigh: Callable[[T, int], int] | None = None,
    ) -> list[T]:
        """Remove and return items from the buckets ``(ctx, vp)`` with ``ctx`` in
        ``sources`` and ``vp`` in ``vps``, redeliveries first, then by seq, while their
        weights add up to less than ``limit``. ``weigh(item, room)`` is an item's weight
        given the room left (at least 1; default 1: ``limit`` items). An item that is
        the head of a run weighs the messages the caller will take with it."""
        if limit <= 0:
            return []
        heads: list[tuple[int, int, K, int]] = []
        for ctx, vp in self._visible(sources, vps):
            prio, seq, _ = self._heaps[(ctx, vp)][0]
            heads.append((prio, seq, ctx, vp))
        heapq.heapify(heads)
        out: list[T] = []
        room = limit
        while heads and room > 0:
            _, _, ctx, vp = heads[0]
            heap = self._heaps[(ctx, vp)]
            item = heapq.heappop(heap)[2]
            out.append(item)
            room -= 1 if weigh is None else max(1, weigh(item, room))
            self._size -= 1
            if heap:
                prio, seq, _ = heap[0]
                heapq.heapreplace(heads, (prio, seq, ctx, vp))
            else:
                heapq.heappop(heads)
                del self._heaps[(ctx, vp)]
                nonempty = self._vps[ctx]
                nonempty.discard(vp)
                if not nonempty:
                    del self._vps[ctx]
        return out

    def drain(self) -> list[tuple[K, int, int, T]]:
        """Remove everything; returns ``(ctx, priority, seq, item)`` (to re-bucket after a V change)."""
        out = [(ctx, prio, seq, item) for (ctx, _), heap in self._heaps.items() for prio, seq, item in heap]
        self._heaps.clear()
        self._vps.clear()
        self._size = 0
        return out
