"""A bounded cache of decoded records, first in first out, by bytes.

The read node keeps decoded records (or decoded batches) it tailed so that polls
of every group are served from memory; when the cache is full the entries stored
first go (they can be read again from the write node). Sizes are given by the
caller (the decoded record's approximate footprint), so the bound is in bytes, not
entries. An entry larger than the whole cache is not stored.

Why not least recently used: records are stored in log order as they are tailed
and read soon after, mostly once per group, so the entry stored first is almost
always the one read longest ago, or never to be read again (a deleted queue's). A
read that moved its entry to the back would cost a write into the cache's links on
every delivery, and it would keep records already delivered ahead of the tailer's
read-ahead, which is still to be read.

``get``/``put``/``pop`` are O(1). Not thread-safe (one per event loop).

Pure logic: no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class CacheStats:
    """Counters since creation (``entries``/``bytes``: current contents)."""

    hits: int
    misses: int
    puts: int
    evictions: int
    evicted_bytes: int
    rejected: int
    entries: int
    bytes: int
    max_bytes: int

    @property
    def hit_ratio(self) -> float:
        looked = self.hits + self.misses
        return self.hits / looked if looked else 0.0


class RecordCache(Generic[K, V]):
    """First-in-first-out cache bounded by the sum of the entries' declared sizes."""

    __slots__ = ("_max", "_data", "_bytes", "_hits", "_misses", "_puts", "_evictions", "_evicted_bytes", "_rejected")

    def __init__(self, max_bytes: int) -> None:
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
            raise ValueError(f"max_bytes must be an integer >= 1, got {max_bytes!r}")
        self._max = max_bytes
        self._data: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = self._puts = 0
        self._evictions = self._evicted_bytes = self._rejected = 0

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        """Membership test; does not count as a use."""
        return key in self._data

    @property
    def bytes(self) -> int:
        return self._bytes

    @property
    def max_bytes(self) -> int:
        return self._max

    @property
    def data(self) -> Mapping[K, tuple[V, int]]:
        """The entries, ``key -> (value, size)``, oldest first: to read, never to change
        (``read_nodes.bulk_offer`` looks records up here; ``note_hits`` counts them)."""
        return self._data

    def note_hits(self, n: int) -> None:
        """Count ``n`` hits of lookups made in ``data`` directly."""
        self._hits += n

    def get(self, key: K) -> V | None:
        """The cached value, or None (a read does not change the order of eviction)."""
        item = self._data.get(key)
        if item is None:
            self._misses += 1
            return None
        self._hits += 1
        return item[0]

    def get_many(self, keys: Iterable[K]) -> list[V | None]:
        """``get`` of each key in turn (None for a miss), in one call."""
        items = list(map(self._data.get, keys))
        misses = items.count(None)
        self._misses += misses
        self._hits += len(items) - misses
        return [None if item is None else item[0] for item in items]

    def put(self, key: K, value: V, size: int) -> bool:
        """Store ``value`` (replacing any previous one) as the newest entry, evicting
        the oldest entries to stay within ``max_bytes``. False (and
        nothing stored, any previous value dropped) when ``size`` exceeds ``max_bytes``."""
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"size must be an integer >= 0, got {size!r}")
        old = self._data.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        if size > self._max:
            self._rejected += 1
            return False
        self._puts += 1
        self._data[key] = (value, size)
        self._bytes += size
        self._evict()
        return True

    def put_many(self, entries: Iterable[tuple[K, V, int]]) -> int:
        """``put`` of each ``(key, value, size)`` in turn, sizes trusted (integers >= 0:
        a caller's own ``size_bytes``), evicting once at the end: when no key of the
        batch was cached before, the same entries stay, in the same order, as with one
        ``put`` each; when the batch replaces entries, an older entry that one ``put``
        each would have evicted before a replacement made room may stay (``evictions``
        may count fewer: an entry replaced by the batch is not first evicted by it).
        The bound holds either way. Returns how many were stored."""
        data = self._data
        pop = data.pop
        limit = self._max
        added = stored = 0
        for key, value, size in entries:
            old = pop(key, None)
            if old is not None:
                added -= old[1]
            if size > limit:
                self._rejected += 1
                continue
            data[key] = (value, size)
            added += size
            stored += 1
        self._puts += stored
        self._bytes += added
        self._evict()
        return stored

    def pop(self, key: K) -> V | None:
        """Remove and return an entry (not counted as an eviction)."""
        item = self._data.pop(key, None)
        if item is None:
            return None
        self._bytes -= item[1]
        return item[0]

    def resize(self, max_bytes: int) -> None:
        """Change the bound, evicting as needed."""
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
            raise ValueError(f"max_bytes must be an integer >= 1, got {max_bytes!r}")
        self._max = max_bytes
        self._evict()

    def _evict(self) -> None:
        while self._bytes > self._max:
            _, (_, size) = self._data.popitem(last=False)
            self._bytes -= size
            self._evictions += 1
            self._evicted_bytes += size

    def clear(self) -> None:
        self._data.clear()
        self._bytes = 0

    def stats(self) -> CacheStats:
        return CacheStats(
            self._hits, self._misses, self._puts, self._evictions, self._evicted_bytes, self._rejected,
            len(self._data), self._bytes, self._max,
        )
