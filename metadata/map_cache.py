"""MapCache: the process-local copy of the placement map and queue registry.

The produce hot path reads only this memory. Contract:

- ``start()`` registers with an ``EventListener`` and then loads everything, so
  no change made after start() can be missed; ``stop()`` unregisters.
- Kept fresh by announcements: a ``map`` event with a newer epoch reloads the
  map, a ``queue`` event reloads (or drops) that queue, a ``resync`` reloads
  everything. Staleness is bounded by pub/sub latency, or by the listener's
  polling interval when pub/sub fails.
- ``refresh()`` reloads on demand (e.g. after a write node answered
  ``stale_map``); ``refresh_map()`` only the map; ``refresh_queues(names)`` only those
  queues' records (one round trip; concurrent calls coalesce: a call whose names a
  flush started after it already re-read returns without I/O).
- ``after_change(name, m)``: what the process that just changed queue ``name`` and
  published (or saw) map ``m`` calls: takes ``m`` if newer (no I/O) and re-reads the
  record of ``name`` (coalesced as above). Nothing is reloaded as a whole.
- Costs: a queue event or record refresh touches that queue only; a map change
  drops the entries, which are rebuilt one by one on lookup (no pass over every
  queue per map, nor per queue it placed).
- The map never goes back to an older epoch. Lookups (``entry``, ``queue``,
  ``queue_by_id``, ``map``, ``epoch``) are synchronous and do no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vpq.metadata.events import EventListener
from vpq.metadata.maps import MapStore
from vpq.metadata.queues import QueueRecord, QueueRegistry


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """What the router needs about one queue, precomputed.

    ``placement`` is None while the map does not place the queue yet; otherwise
    ``virtual_partitions`` and ``placement`` come from the map (authoritative for
    routing; during a split the registry may already announce the larger V)."""

    record: QueueRecord
    epoch: int
    virtual_partitions: int
    placement: tuple[int, ...] | None


class MapCache:
    def __init__(self, queues: QueueRegistry, maps: MapStore, listener: EventListener) -> None:
        self._queues = queues
        self._maps = maps
        self._listener = listener
        self._lock = asyncio.Lock()
        self._map: dict[str, Any] | None = None
        self._records: dict[str, QueueRecord] = {}
        self._entries: dict[str, QueueEntry] = {}
        self._by_id: dict[int, QueueRecord] = {}
        self._wanted: set[str] = set()  # records asked for by refresh_queues, not yet re-read
        self._started = False

    async def start(self) -> None:
        if self._started:
            return
        self._listener.add_callback(self._on_event)
        self._started = True
        try:
            await self.refresh()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if self._started:
            self._listener.remove_callback(self._on_event)
            self._started = False

    # lookups (no I/O)
    def entry(self, name: str) -> QueueEntry | None:
        e = self._entries.get(name)
        if e is None:
            rec = self._records.get(name)
            if rec is None:
                return None
            e = self._entries[name] = self._entry(rec)
        return e

    def queue(self, name: str) -> QueueRecord | None:
        return self._records.get(name)

    def queue_by_id(self, queue_id: int) -> QueueRecord | None:
        return self._by_id.get(queue_id)

    def queues(self) -> list[QueueRecord]:
        return [self._records[n] for n in sorted(self._records)]

    @property
    def map(self) -> dict[str, Any] | None:
        """The cached map in wire format (do not mutate)."""
        return self._map

    @property
    def epoch(self) -> int:
        return int(self._map["epoch"]) if self._map is not None else 0

    # refreshing
    async def refresh(self) -> None:
        async with self._lock:
            records = await self._queues.list()
            m = await self._maps.current()
            self._records = {r.name: r for r in records}
            self._set_map(m)
            self._rebuild()

    async def refresh_map(self) -> None:
        async with self._lock:
            self._set_map(await self._maps.current())

    async def refresh_queues(self, names: Iterable[str]) -> None:
        """Re-read the records of ``names`` (see the module docstring)."""
        mine = set(names)
        self._wanted |= mine
        async with self._lock:
            if not mine & self._wanted:
                return  # a flush that started after we asked has re-read them
            batch, self._wanted = sorted(self._wanted), set()
            try:
                records = await self._queues.get_many(batch)
            except BaseException:
                self._wanted |= set(batch)  # still wanted: their callers will retry
                raise
            for name, rec in zip(batch, records, strict=True):
                self._put_record(name, rec)

    async def after_change(self, name: str, m: Mapping[str, Any] | None) -> None:
        """See the module docstring."""
        if m is not None and int(m["epoch"]) > self.epoch:
            self._set_map(dict(m))
        await self.refresh_queues([name])

    async def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "map":
            if int(event.get("epoch", 0)) > self.epoch:
                await self.refresh_map()
        elif kind == "queue" and isinstance(event.get("name"), str):
            await self.refresh_queues([event["name"]])
        elif kind == "resync":
            await self.refresh()

    def _set_map(self, m: dict[str, Any] | None) -> None:
        """Take ``m`` unless it is older than the map held (entries follow on lookup)."""
        if m is None:
            return  # keep what we have: a map never disappears in normal operation
        if self._map is None or int(m["epoch"]) > int(self._map["epoch"]):
            self._map = m
            self._entries = {}

    def _entry(self, rec: QueueRecord) -> QueueEntry:
        q = self._map["queues"].get(rec.name) if self._map is not None else None
        if q is None:
            return QueueEntry(rec, self.epoch, rec.virtual_partitions, None)
        return QueueEntry(rec, self.epoch, int(q["virtual_partitions"]), tuple(q["placement"]))

    def _put_record(self, name: str, rec: QueueRecord | None) -> None:
        """One queue's record changed (None: gone)."""
        self._entries.pop(name, None)
        old = self._records.pop(name, None)
        if old is not None and self._by_id.get(old.id) is old:
            del self._by_id[old.id]
        if rec is not None:
            self._records[name] = rec
            self._by_id[rec.id] = rec

    def _rebuild(self) -> None:
        """After all records were reloaded (entries are rebuilt on lookup)."""
        self._entries = {}
        self._by_id = {r.id: r for r in self._records.values()}
