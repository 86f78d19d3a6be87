"""Per-queue index of the physical partitions a read node tails (RocketMQ's
ConsumeQueue idea).

Many queues share one physical partition (pp). While tailing a pp the reader
calls ``add(pp, offset, queue_id, ref)`` for every record, in the pp's offset
order; the index keeps, per (pp, queue), the ordered offsets of that queue's
records and a caller-defined integer ``ref`` per record (where the record can be
found again: e.g. the base offset of its batch in the record cache). So a group
polling a small queue merged into a busy pp reads only its own queue's offsets:
``entries_from(pp, queue, from_offset, limit)`` costs ``O(log n + returned)``,
``count_from`` (lag) ``O(log n)``, never a scan of the partition.

Each queue's records are kept per isolation context (``context_id``, the
interned id records carry), so a group reads one context of a queue without
looking at the others (``entries_from(..., context_id=c)``); without a context
the contexts' entries are merged in offset order.

Storage is compact: per (pp, queue, context) two ``array('q')`` columns in fixed-size
chunks (16 bytes per record), so ``truncate_below`` (retention, or eviction
below every group's low watermark) drops whole chunks without copying.

``end_offset(pp)``: every record of ``pp`` below it has been indexed (``add``
and ``advance`` move it); a reader that got fewer entries than it asked for has
seen every record of its queue below ``end_offset``.

Pure logic: no I/O.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from itertools import islice

NO_REF = -1
"""``ref`` of a record added without one."""

DEFAULT_CHUNK = 1024


def _check_nonneg(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} must be an integer >= 0, got {value!r}")
    return value


class _Column:
    """Ordered offsets and refs of one queue in one pp. Every chunk holds exactly
    ``chunk`` entries except the last; ``head`` entries of the first are dropped."""

    __slots__ = ("chunk", "offsets", "refs", "firsts", "head", "total")

    def __init__(self, chunk: int) -> None:
        self.chunk = chunk
        self.offsets: list[array] = []
        self.refs: list[array] = []
        self.firsts: list[int] = []
        self.head = 0
        self.total = 0  # positions used, counting the dropped head

    def __len__(self) -> int:
        return self.total - self.head

    def append(self, offset: int, ref: int) -> None:
        if not self.offsets or len(self.offsets[-1]) == self.chunk:
            self.offsets.append(array("q"))
            self.refs.append(array("q"))
            self.firsts.append(offset)
        self.offsets[-1].append(offset)
        self.refs[-1].append(ref)
        self.total += 1

    def extend(self, offsets: list[int], refs: list[int]) -> None:
        """``append`` of each ``(offsets[i], refs[i])``, a chunk's worth at a time."""
        i, n, ch = 0, len(offsets), self.chunk
        while i < n:
            if not self.offsets or len(self.offsets[-1]) == ch:
                self.offsets.append(array("q"))
                self.refs.append(array("q"))
                self.firsts.append(offsets[i])
            j = i + ch - len(self.offsets[-1])
            self.offsets[-1].fromlist(offsets[i:j])
            self.refs[-1].fromlist(refs[i:j])
            i = j
        self.total += n

    def position(self, offset: int) -> int:
        """Absolute position of the first live entry with an offset >= ``offset``."""
        ci = bisect_right(self.firsts, offset) - 1
        if ci < 0:
            p = 0
        else:
            p = ci * self.chunk + bisect_left(self.offsets[ci], offset)
        return max(p, self.head)

    def slice(self, start: int, stop: int) -> tuple[list[int], list[int]]:
        offs: list[int] = []
        refs: list[int] = []
        ch = self.chunk
        while start < stop:
            ci, j = divmod(start, ch)
            end = min(stop - ci * ch, ch)
            offs.extend(self.offsets[ci][j:end])
            refs.extend(self.refs[ci][j:end])
            start = ci * ch + end
        return offs, refs

    def truncate_below(self, offset: int) -> int:
        p = self.position(offset)
        dropped = p - self.head
        k = p // self.chunk
        if k:
            del self.offsets[:k], self.refs[:k], self.firsts[:k]
            self.total -= k * self.chunk
            p -= k * self.chunk
        self.head = p
        return dropped

    def first(self) -> int:
        return self.offsets[0][self.head]

    def last(self) -> int:
        return self.offsets[-1][-1]


class QueueIndex:
    """Offsets of each queue's records, per physical partition (see module docstring)."""

    __slots__ = ("_chunk", "_cols", "_end", "_start")

    def __init__(self, chunk_size: int = DEFAULT_CHUNK) -> None:
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
        self._chunk = chunk_size
        self._cols: dict[int, dict[int, dict[int, _Column]]] = {}  # pp -> queue -> context -> column
        self._end: dict[int, int] = {}
        self._start: dict[int, int] = {}

    def add(self, pp: int, offset: int, queue_id: int, ref: int = NO_REF, context_id: int = 0) -> None:
        """Index the record at ``offset`` of ``pp`` as one of ``queue_id``'s, in context
        ``context_id``. Offsets must increase within a pp (ValueError otherwise)."""
        _check_nonneg(offset, "offset")
        _check_nonneg(queue_id, "queue_id")
        if not isinstance(ref, int) or isinstance(ref, bool) or ref < NO_REF:
            raise ValueError(f"ref must be an integer >= -1, got {ref!r}")
        end = self._end.get(pp)
        if end is None:
            _check_nonneg(pp, "pp")
            end = 0
        if offset < end:
            raise ValueError(f"pp {pp}: offset {offset} is below the indexed end {end} (offsets must increase)")
        self._column(pp, queue_id, context_id).append(offset, ref)
        self._end[pp] = offset + 1

    def _column(self, pp: int, queue_id: int, context_id: int) -> _Column:
        """The column of ``(pp, queue_id, context_id)``, created when missing."""
        cols = self._cols.get(pp)
        if cols is None:
            cols = self._cols[pp] = {}
        ctxs = cols.get(queue_id)
        if ctxs is None:
            ctxs = cols[queue_id] = {}
        col = ctxs.get(context_id)
        if col is None:
            col = ctxs[context_id] = _Column(self._chunk)
        return col

    def add_many(self, pp: int, entries: Iterable[tuple[int, int, int, int]]) -> None:
        """``add`` of each ``(offset, queue_id, ref, context_id)`` in turn, for values
        read from a verified record batch (not type-checked; offsets must still
        increase, ValueError otherwise, with the entries before the bad one added)."""
        _check_nonneg(pp, "pp")
        end = self._end.get(pp, 0)
        last: tuple[int, int] | None = None
        col: _Column | None = None
        try:
            for offset, queue_id, ref, context_id in entries:
                if offset < end:
                    raise ValueError(f"pp {pp}: offset {offset} is below the indexed end {end} (offsets must increase)")
                if (queue_id, context_id) != last:
                    last = (queue_id, context_id)
                    col = self._column(pp, queue_id, context_id)
                col.append(offset, ref)  # type: ignore[union-attr]
                end = offset + 1
        finally:
            if end:
                self._end[pp] = max(end, self._end.get(pp, 0))

    def add_columns(
        self, pp: int, offsets: list[int], queue_ids: list[int], refs: list[int], context_ids: list[int]
    ) -> None:
        """``add_many(pp, zip(offsets, queue_ids, refs, context_ids))``, for columns of
        equal length read from a verified record batch: when every entry is of one queue
        and context, at consecutive offsets (a batch, usually), they are added as one
        run; otherwise entry by entry, with the same errors."""
        n = len(offsets)
        if not n:
            return
        first, q, c = offsets[0], queue_ids[0], context_ids[0]
        end = self._end.get(pp)
        if (
            end is None or first < end or queue_ids.count(q) != n or context_ids.count(c) != n
            or offsets != list(range(first, first + n))
        ):
            self.add_many(pp, zip(offsets, queue_ids, refs, context_ids))
            return
        self._column(pp, q, c).extend(offsets, refs)
        self._end[pp] = first + n

    def advance(self, pp: int, offset: int) -> None:
        """Every record of ``pp`` below ``offset`` has been indexed (e.g. after a
        batch whose tail held nothing to index). Never moves back."""
        _check_nonneg(pp, "pp")
        _check_nonneg(offset, "offset")
        if offset > self._end.get(pp, 0):
            self._end[pp] = offset

    def end_offset(self, pp: int) -> int:
        """Every record of ``pp`` below this offset has been indexed (0 when none)."""
        return self._end.get(pp, 0)

    def start_offset(self, pp: int) -> int:
        """Entries below this offset were truncated away (0 when never truncated)."""
        return self._start.get(pp, 0)

    def _ctx_cols(self, pp: int, queue_id: int, context_id: int | None) -> list[_Column]:
        cols = self._cols.get(pp)
        ctxs = None if cols is None else cols.get(queue_id)
        if ctxs is None:
            return []
        if context_id is None:
            return list(ctxs.values())
        col = ctxs.get(context_id)
        return [] if col is None else [col]

    def contexts(self, pp: int, queue_id: int) -> list[int]:
        """Context ids of ``queue_id``'s records indexed in ``pp``."""
        cols = self._cols.get(pp)
        ctxs = None if cols is None else cols.get(queue_id)
        return sorted(ctxs) if ctxs else []

    def entries_from(
        self, pp: int, queue_id: int, from_offset: int, limit: int, context_id: int | None = None
    ) -> list[tuple[int, int]]:
        """Up to ``limit`` ``(offset, ref)`` of ``queue_id`` in ``pp`` (in ``context_id``
        only, when given) with offset >= ``from_offset``, ascending."""
        cols = self._ctx_cols(pp, queue_id, context_id)
        if not cols or limit <= 0:
            return []
        parts = []
        for col in cols:
            p = col.position(from_offset)
            offs, refs = col.slice(p, min(col.total, p + limit))
            parts.append(list(zip(offs, refs)))
        if len(parts) == 1:
            return parts[0]
        return list(islice(heapq.merge(*parts), limit))

    def offsets_from(self, pp: int, queue_id: int, from_offset: int, limit: int, context_id: int | None = None) -> list[int]:
        """Like ``entries_from`` without the refs."""
        return [o for o, _ in self.entries_from(pp, queue_id, from_offset, limit, context_id)]

    def count_from(self, pp: int, queue_id: int, from_offset: int, context_id: int | None = None) -> int:
        """How many records of ``queue_id`` in ``pp`` (in ``context_id`` when given) are
        indexed at offsets >= ``from_offset``."""
        return sum(col.total - col.position(from_offset) for col in self._ctx_cols(pp, queue_id, context_id))

    def count(self, pp: int, queue_id: int) -> int:
        return sum(len(col) for col in self._ctx_cols(pp, queue_id, None))

    def bounds(self, pp: int, queue_id: int) -> tuple[int, int] | None:
        """``(first, last)`` indexed offset of ``queue_id`` in ``pp``, None when none."""
        cols = [c for c in self._ctx_cols(pp, queue_id, None) if len(c)]
        if not cols:
            return None
        return min(c.first() for c in cols), max(c.last() for c in cols)

    def truncate_below(self, pp: int, offset: int) -> int:
        """Drop every entry of ``pp`` below ``offset`` (``end_offset`` moves up to it
        if it was lower); returns how many were dropped."""
        _check_nonneg(offset, "offset")
        cols = self._cols.get(pp)
        if offset > self._start.get(pp, 0):
            self._start[pp] = offset
        if offset > self._end.get(pp, 0):
            _check_nonneg(pp, "pp")
            self._end[pp] = offset  # records below a truncation point will never be indexed
        if cols is None:
            return 0
        dropped = 0
        for qid in list(cols):
            ctxs = cols[qid]
            for cid in list(ctxs):
                col = ctxs[cid]
                dropped += col.truncate_below(offset)
                if not len(col):
                    del ctxs[cid]
            if not ctxs:
                del cols[qid]
        if not cols:
            del self._cols[pp]
        return dropped

    def queues(self, pp: int) -> list[int]:
        """Queue ids with indexed records in ``pp``."""
        return sorted(self._cols.get(pp, {}))

    def partitions(self) -> list[int]:
        return sorted(self._end)

    def entries(self) -> int:
        """Indexed records over all pps and queues."""
        return sum(len(c) for cols in self._cols.values() for ctxs in cols.values() for c in ctxs.values())

    def memory_bytes(self) -> int:
        """Approximate bytes held by the offset and ref columns."""
        return sum(
            sum(a.buffer_info()[1] * a.itemsize for a in c.offsets) * 2
            for cols in self._cols.values() for ctxs in cols.values() for c in ctxs.values()
        )
