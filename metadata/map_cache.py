"""MapCache: the process-local copy of the placement map and queue registry.

The produce hot path reads only this memory. Contract:

- ``start()`` registers with an ``EventListener`` and then loads everything, so
  no change made after start() can be missed; ``stop()`` unregisters.
- Kept fresh by announcements: a ``map`` event with a newer epoch reloads the
  map, a ``queue`` event reloads (or drops) that queue, a ``resync`` reloads
  everything. Staleness is bounded by pub/sub latency, or by the listener's
  polling interval when pub/sub fails.
- ``refresh()`` reloads on demand (e.g. after a write node answered
  ``stale_map``); ``refresh_map()`` only the map.
- The map never goes back to an older epoch. Lookups (``entry``, ``queue``,
  ``queue_by_id``, ``map``, ``epoch``) are synchronous and do no I/O.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from metadata.events import EventListener
from metadata.maps import MapStore
from metadata.queues import QueueRecord, QueueRegistry


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
        return self._entries.get(name)

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
            self._rebuild()

    async def _refresh_queue(self, name: str) -> None:
        async with self._lock:
            rec = await self._queues.get(name)
            if rec is None:
                self._records.pop(name, None)
            else:
                self._records[name] = rec
            self._rebuild()

    async def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "map":
            if int(event.get("epoch", 0)) > self.epoch:
                await self.refresh_map()
        elif kind == "queue" and isinstance(event.get("name"), str):
            await self._refresh_queue(event["name"])
        elif kind == "resync":
            await self.refresh()

    def _set_map(self, m: dict[str, Any] | None) -> None:
        if m is None:
            return  # keep what we have: a map never disappears in normal operation
        if self._map is None or int(m["epoch"]) >= int(self._map["epoch"]):
            self._map = m

    def _rebuild(self) -> None:
        placed = self._map["queues"] if self._map is not None else {}
        epoch = self.epoch
        entries: dict[str, QueueEntry] = {}
        for name, rec in self._records.items():
            q = placed.get(name)
            if q is None:
                entries[name] = QueueEntry(rec, epoch, rec.virtual_partitions, None)
            else:
                entries[name] = QueueEntry(rec, epoch, int(q["virtual_partitions"]), tuple(q["placement"]))
        self._entries = entries
        self._by_id = {r.id: r for r in self._records.values()}
