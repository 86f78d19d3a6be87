"""MapCache: the process-local view of the placement map and queue registry.

The produce hot path reads only this memory. It holds the map's epoch and, for the
queues this process used lately, their registry record and map entry, loaded on first
use: an idle queue costs a process nothing. Contract:

- ``start()`` registers with an ``EventListener`` and then reads the map's epoch, so no
  change made after start() can be missed; ``stop()`` unregisters.
- Lookups (``entry``, ``queue``, ``queue_by_id``, ``epoch``) are synchronous, do no I/O,
  and answer None for a queue not cached. The caller then asks ``refresh(names, ids)``,
  which loads those queues (record and entry read atomically with the epoch,
  ``MapStore.load_queues``) and looks again.
- Epoch rule: every cached entry is at least as new as ``epoch`` says. ``refresh()``
  (``sync=True``) reads the map's epoch with the queues changed since the cache's epoch
  (``MapStore.delta``), re-reads the cached ones among them and only then takes the new
  epoch; a queue loaded later is read from a map at least that new. So when the epoch is
  E, no cached entry predates E (what the write nodes' remap fencing relies on). An
  entry's ``epoch`` is the newest of the cache's epoch and the epoch it was read at.
- Kept fresh by announcements: a ``map`` event with a newer epoch syncs as above (work
  proportional to what changed, for the cached queues only), a ``queue`` event re-reads
  that queue if cached, a ``resync`` drops everything and re-reads the epoch.
- ``refresh_queues(names)`` / ``after_change(name, m)`` re-read those of the queues that
  are cached (the process that just changed a queue calls ``after_change``).
- All reads go through one flusher: requests arriving while a read is under way are
  served together by the next one (one round trip for many misses), and the epoch never
  goes back.
- At most ``capacity`` queues are cached; the least recently looked up (``entry``) is
  dropped first, and is simply loaded again on its next use.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vpq.metadata.aio import cancel_and_wait
from vpq.metadata.events import EventListener
from vpq.metadata.maps import MapStore
from vpq.metadata.queues import QueueRecord, QueueRegistry

DEFAULT_CAPACITY = 100_000


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
    def __init__(
        self, queues: QueueRegistry, maps: MapStore, listener: EventListener, *, capacity: int = DEFAULT_CAPACITY
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self._queues = queues
        self._maps = maps
        self._listener = listener
        self._capacity = capacity
        self._epoch = 0
        self._entries: OrderedDict[str, QueueEntry] = OrderedDict()  # least recently used first
        self._by_id: dict[int, QueueRecord] = {}
        self._want_names: set[str] = set()
        self._want_ids: set[int] = set()
        self._want_sync = False
        self._want_resync = False
        self._next: asyncio.Future[None] | None = None  # the flush the next requests join
        self._task: asyncio.Task[None] | None = None
        self._started = False
        self.loads = 0  # round trips that loaded queues (for tests and benchmarks)

    async def start(self) -> None:
        if self._started:
            return
        self._listener.add_callback(self._on_event)
        self._started = True
        try:
            await self._request(resync=True)
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        if self._started:
            self._listener.remove_callback(self._on_event)
            self._started = False
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        fut, self._next = self._next, None
        if fut is not None:
            fut.cancel()

    # lookups (no I/O)
    def entry(self, name: str) -> QueueEntry | None:
        e = self._entries.get(name)
        if e is None:
            return None
        self._entries.move_to_end(name)
        if e.epoch < self._epoch:
            e = self._entries[name] = dataclasses.replace(e, epoch=self._epoch)
        return e

    def queue(self, name: str) -> QueueRecord | None:
        e = self._entries.get(name)
        return e.record if e is not None else None

    def queue_by_id(self, queue_id: int) -> QueueRecord | None:
        return self._by_id.get(queue_id)

    def queues(self) -> list[QueueRecord]:
        """The cached queues' records, by name."""
        return [self._entries[n].record for n in sorted(self._entries)]

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def epoch(self) -> int:
        return self._epoch

    # refreshing
    async def refresh(self, names: Iterable[str] = (), ids: Iterable[int] = (), *, sync: bool = True) -> None:
        """Load ``names`` and queue ids ``ids`` (cached or not); with ``sync``, first
        bring the cached queues and the epoch up to the stored map (see the module
        docstring)."""
        await self._request(names=names, ids=ids, sync=sync)

    async def refresh_map(self) -> None:
        """``refresh()``: the stored epoch and what it changed among the cached queues."""
        await self._request(sync=True)

    async def refresh_queues(self, names: Iterable[str]) -> None:
        """Re-read those of ``names`` that are cached."""
        mine = [n for n in names if n in self._entries]
        if mine:
            await self._request(names=mine)

    async def after_change(self, name: str, m: Mapping[str, Any] | None = None) -> None:
        """See the module docstring (``m``, the map in force after the change, is not
        needed: a queue not cached is read when first used)."""
        await self.refresh_queues([name])

    async def _on_event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "map":
            if int(event.get("epoch", 0)) > self._epoch:
                await self._request(sync=True)
        elif kind == "queue" and isinstance(event.get("name"), str):
            await self.refresh_queues([event["name"]])
        elif kind == "resync":
            await self._request(resync=True)

    # the flusher
    async def _request(
        self, *, names: Iterable[str] = (), ids: Iterable[int] = (), sync: bool = False, resync: bool = False
    ) -> None:
        self._want_names.update(names)
        self._want_ids.update(int(i) for i in ids)
        self._want_sync |= sync
        self._want_resync |= resync
        fut = self._next
        if fut is None:
            fut = self._next = asyncio.get_running_loop().create_future()
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="vpq-map-cache")
        await asyncio.shield(fut)

    async def _run(self) -> None:
        try:
            while self._next is not None:
                fut, self._next = self._next, None
                names, ids = self._want_names, self._want_ids
                sync, resync = self._want_sync, self._want_resync
                self._want_names, self._want_ids, self._want_sync, self._want_resync = set(), set(), False, False
                try:
                    await self._flush(names, ids, sync, resync)
                except asyncio.CancelledError:
                    fut.cancel()
                    raise
                except Exception as exc:
                    if not fut.done():
                        fut.set_exception(exc)
                    continue
                if not fut.done():
                    fut.set_result(None)
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _flush(self, names: set[str], ids: set[int], sync: bool, resync: bool) -> None:
        epoch = None
        if resync:
            epoch = await self._maps.epoch()
            self._entries.clear()
            self._by_id.clear()
        elif sync:
            epoch, changed = await self._maps.delta(self._epoch)
            names |= {n for n, _ in changed if n in self._entries}
        if names or ids:
            self.loads += 1
            at, rows = await self._maps.load_queues(sorted(names), sorted(ids))
            for name, raw, placed in rows:
                self._put(name, QueueRecord.from_json(raw) if raw else None, placed, at)
        if epoch is not None and epoch > self._epoch:
            self._epoch = epoch

    def _put(self, name: str, rec: QueueRecord | None, placed: Mapping[str, Any] | None, at: int) -> None:
        """One queue read at epoch ``at`` (``rec`` None: gone)."""
        old = self._entries.pop(name, None)
        if old is not None and self._by_id.get(old.record.id) is old.record:
            del self._by_id[old.record.id]
        if rec is None:
            return
        ep = max(at, self._epoch)
        if placed is None:
            e = QueueEntry(rec, ep, rec.virtual_partitions, None)
        else:
            e = QueueEntry(rec, ep, int(placed["virtual_partitions"]), tuple(placed["placement"]))
        self._entries[name] = e
        self._by_id[rec.id] = rec
        while len(self._entries) > self._capacity:
            _, gone = self._entries.popitem(last=False)
            if self._by_id.get(gone.record.id) is gone.record:
                del self._by_id[gone.record.id]
