"""One ``PartitionTailer`` per physical partition, shared by every group of the node.

A group ``subscribe``s to each pp its queue lives in with a listener and the
offset it needs from; the first subscriber starts the pp's tailer there, later
ones make it cover their offset too (``require``). When the last subscriber of
a pp leaves, its tailer stops (its cached records stay until evicted).

Groups report the contexts of their queue that no live consumer of theirs may
take (``set_cold``); records of a context cold for every reporting group of its
queue are indexed but not cached, so traffic nobody consumes does not fill the
cache (it is read from the write node if someone comes for it).

Each tailer decodes and caches at most ``read_ahead_bytes`` past its most advanced
reader (``PartitionTailer``'s read-ahead; 0: no bound), and never more than its share
of the cache: ``cache_bytes`` / (2 x tailers), so the read-ahead of every pp fits in
the cache with room for what the groups hold.
"""

from __future__ import annotations

from vpq.read_nodes.tailer import Listener, PartitionTailer, RecordSource


class TailerPool:
    def __init__(
        self,
        source: RecordSource,
        *,
        max_bytes: int = 1 << 20,
        wait_ms: int = 1000,
        retry_ms: int = 200,
        truncate_ms: int = 1000,
        keep_offsets: int = 0,
        read_ahead_bytes: int = 0,
        cache_bytes: int = 0,
    ) -> None:
        self.source = source
        self._read_ahead = read_ahead_bytes
        self._cache_bytes = cache_bytes
        self._max_bytes = max_bytes
        self._wait_ms = wait_ms
        self._retry_ms = retry_ms
        self._truncate_s = truncate_ms / 1000.0
        self._keep = keep_offsets
        self._tailers: dict[int, PartitionTailer] = {}
        self._cold: dict[int, dict[object, frozenset[int]]] = {}  # queue id -> reader -> cold contexts

    def set_cold(self, key: object, queue_id: int, contexts: frozenset[int] | None) -> None:
        """Reader ``key`` of ``queue_id`` takes no record of ``contexts`` now (None: it
        stopped reading the queue)."""
        readers = self._cold.setdefault(queue_id, {})
        if contexts is None:
            readers.pop(key, None)
        else:
            readers[key] = contexts
        if not readers:
            del self._cold[queue_id]
            self.source.cold.pop(queue_id, None)
            return
        sets = iter(readers.values())
        common = next(sets)
        for other in sets:
            common = common & other
        if common:
            self.source.cold[queue_id] = common
        else:
            self.source.cold.pop(queue_id, None)

    def subscribe(self, pp: int, key: object, listener: Listener, offset: int) -> PartitionTailer:
        """Register ``listener`` (called with the pp after new records were indexed)
        and make the pp's tailer cover ``offset`` onwards."""
        tailer = self._tailers.get(pp)
        if tailer is None:
            tailer = self._tailers[pp] = PartitionTailer(
                pp, self.source, max_bytes=self._max_bytes, wait_ms=self._wait_ms, retry_ms=self._retry_ms,
                truncate_every_s=self._truncate_s, keep_offsets=self._keep,
            )
            self._share_read_ahead()
            tailer.start(offset)
        else:
            tailer.require(offset)
        tailer.add_listener(key, listener)
        tailer.set_position(key, offset, scanned_to=offset)  # nothing scanned yet
        return tailer

    async def unsubscribe(self, pp: int, key: object) -> None:
        tailer = self._tailers.get(pp)
        if tailer is None:
            return
        tailer.remove_listener(key)
        if tailer.listeners == 0:
            del self._tailers[pp]
            self._share_read_ahead()
            await tailer.stop()

    def _share_read_ahead(self) -> None:
        bound = self._read_ahead
        if bound and self._cache_bytes and self._tailers:
            bound = max(1, min(bound, self._cache_bytes // (2 * len(self._tailers))))
        for tailer in self._tailers.values():
            tailer.read_ahead_bytes = bound

    def get(self, pp: int) -> PartitionTailer | None:
        return self._tailers.get(pp)

    def tailers(self) -> dict[int, PartitionTailer]:
        return dict(self._tailers)

    async def stop(self) -> None:
        tailers, self._tailers = self._tailers, {}
        for tailer in tailers.values():
            await tailer.stop()
