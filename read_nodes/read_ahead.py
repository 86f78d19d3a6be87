"""How far one tailer has read past the most advanced of its readers.

The tailer reports every read it takes (``read(end_offset, nbytes)``: the read's
records lie below ``end_offset``); each reader reports how far it has scanned the
partition (``scanned(key, offset)``: it has looked at every record below ``offset``
that it can take now). ``ahead()`` is the number of bytes of the reads that end
above the most advanced reader: what was read for readers that have not come to it
yet. With no reader that reported, nothing is ahead (a reader that has not scanned
yet must not make the tailer hold back).

The tailer decodes and caches what lies within its read-ahead bound of the readers
and only indexes what lies further (``read_nodes.tailer``), so a backlog longer than
the record cache is decoded once, when its reader comes to it, instead of being
cached, evicted before use and read again.

Pure logic: no I/O, not thread-safe.
"""

from __future__ import annotations

from collections import deque


class ReadAhead:
    __slots__ = ("_reads", "_bytes", "_scanned", "_front")

    def __init__(self) -> None:
        self._reads: deque[tuple[int, int]] = deque()  # (end offset, bytes), in read order
        self._bytes = 0
        self._scanned: dict[object, int] = {}
        self._front: int | None = None  # max of _scanned, None without readers

    def read(self, end_offset: int, nbytes: int) -> None:
        """The tailer took a read of ``nbytes`` whose records lie below ``end_offset``."""
        if nbytes > 0:
            self._reads.append((end_offset, nbytes))
            self._bytes += nbytes

    def scanned(self, key: object, offset: int) -> None:
        """Reader ``key`` has scanned every record below ``offset`` that it can take now."""
        self._scanned[key] = offset
        front = self._front
        if front is None or offset > front:
            self._front = offset
        elif offset < front:
            self._front = max(self._scanned.values())

    def forget(self, key: object) -> None:
        """Reader ``key`` stopped reading."""
        if self._scanned.pop(key, None) is not None:
            self._front = max(self._scanned.values()) if self._scanned else None

    def restart(self) -> None:
        """The tailer reads again from an earlier offset: what it read is forgotten."""
        self._reads.clear()
        self._bytes = 0

    @property
    def front(self) -> int | None:
        """How far the most advanced reader has scanned (None: no reader reported)."""
        return self._front

    def ahead(self) -> int:
        """Bytes of the reads that end above the most advanced reader."""
        front = self._front
        if front is None:
            return 0
        reads = self._reads
        while reads and reads[0][0] <= front:
            self._bytes -= reads.popleft()[1]
        return self._bytes
