"""``OffsetSet``: a sorted set of log offsets in 8 bytes each. Pure, no I/O.

The ack tracker keeps the offsets of every deferred (delayed) message of a stream, and
a read node may hold a million of them for hours. A ``SortedList`` of Python ints costs
about 40 bytes an offset (the int object and a pointer); this keeps them in sorted
``array('q')`` chunks of at most ``2 * CHUNK`` values, with each chunk's largest value in
a list for the chunk search. It offers the part of ``SortedList``'s interface the
tracker uses: ``add``, ``discard``, ``in``, ``len``, indexing (``[0]`` is the smallest)
and ``irange``. Values are non-negative ints below 2**63.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator

CHUNK = 1024


class OffsetSet:
    __slots__ = ("_chunks", "_maxes", "_len")

    def __init__(self, values: Iterable[int] = ()) -> None:
        self._chunks: list[array] = []
        self._maxes: list[int] = []
        self._len = 0
        for v in values:
            self.add(v)

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __contains__(self, value: object) -> bool:
        if not isinstance(value, int):
            return False
        i = bisect_left(self._maxes, value)
        if i == len(self._chunks):
            return False
        c = self._chunks[i]
        j = bisect_left(c, value)
        return j < len(c) and c[j] == value

    def add(self, value: int) -> None:
        chunks, maxes = self._chunks, self._maxes
        if not chunks:
            chunks.append(array("q", [value]))
            maxes.append(value)
            self._len = 1
            return
        i = bisect_left(maxes, value)
        if i == len(chunks):
            i -= 1  # beyond every chunk's largest: the end of the last one
        c = chunks[i]
        j = bisect_left(c, value)
        if j < len(c) and c[j] == value:
            return
        c.insert(j, value)
        self._len += 1
        if value > maxes[i]:
            maxes[i] = value
        if len(c) > 2 * CHUNK:
            tail = c[CHUNK:]
            del c[CHUNK:]
            chunks.insert(i + 1, tail)
            maxes[i] = c[-1]
            maxes.insert(i + 1, tail[-1])

    def discard(self, value: int) -> None:
        i = bisect_left(self._maxes, value)
        if i == len(self._chunks):
            return
        c = self._chunks[i]
        j = bisect_left(c, value)
        if j < len(c) and c[j] == value:
            del c[j]
            self._len -= 1
            if not c:
                del self._chunks[i]
                del self._maxes[i]
            elif j == len(c):
                self._maxes[i] = c[-1]

    def __getitem__(self, index: int) -> int:
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError("OffsetSet index out of range")
        for c in self._chunks:
            if index < len(c):
                return c[index]
            index -= len(c)
        raise IndexError("OffsetSet index out of range")  # pragma: no cover - lengths agree

    def __iter__(self) -> Iterator[int]:
        for c in self._chunks:
            yield from c

    def irange(
        self, minimum: int | None = None, maximum: int | None = None, inclusive: tuple[bool, bool] = (True, True)
    ) -> Iterator[int]:
        """The values between ``minimum`` and ``maximum`` (None: unbounded), ascending;
        ``inclusive`` says whether each bound itself is included (as ``SortedList.irange``)."""
        start = 0 if minimum is None else bisect_left(self._maxes, minimum)
        for c in self._chunks[start:]:
            j = 0 if minimum is None else bisect_left(c, minimum)
            for v in c[j:]:
                if minimum is not None and not inclusive[0] and v == minimum:
                    continue
                if maximum is not None and (v > maximum or (v == maximum and not inclusive[1])):
                    return
                yield v
