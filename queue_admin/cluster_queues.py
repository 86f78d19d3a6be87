"""Queue administration against the metadata store: registry, placement map, lineage.

``QueueAdmin`` implements the queue half of the gateway's ``Backend``:

- ``put(name, config)``: ``QueueRegistry.create_or_update`` (V may only grow: 409), then
  ``place(name, V)``. Answers ``(QueueInfo dict, created)`` once the queue is placed in a
  published map.
- ``place(name, V)`` (idempotent; safe to run concurrently, in one process and from
  several gateways). Map changes go through a ``queue_admin.map_batcher.MapBatcher``: the
  changes of concurrent puts and deletes are published together in ONE map
  compare-and-swap (group commit), lineage of all their new vps opened in one pipeline.

  * queue not in the map: compute its placement (``cluster_placement.plan_placement``),
    open the lineage range ``(pp, end)`` of every vp at the map epoch the commit starts
    from (``end``: the pp's end offset asked of its write node just before, see
    ``queue_admin.log_ends``; 0 when unknown), then publish the map with the queue added at the next epoch (compare-and-swap,
    retried on conflict). Lineage is written first so that a map never places a vp
    without lineage; concurrent creators agree through it (the first open range of a vp
    wins, the map takes the pps the lineage holds). Lineage left by an earlier queue of
    the same name that is not a clean creation (several ranges, sealed ranges, vps
    beyond V) is dropped first.
  * queue placed with fewer vps than V: publish the split placement (CAS), then copy the
    lineage of each parent vp to its children (``split_lineage``, at the published epoch).
  * unless the commit created the queue from lineage it read back complete, finally
    fill any vp still missing lineage (a crash between a publish and its lineage copy):
    splits first (``lineage_repair_splits``), then ``(pp, 0)``.

- ``delete(name)``: registry entry, then the map entry (CAS, group-committed), the
  lineage, every group with all its state (record, members, start offsets, ack state,
  lease, fence counter), then the dead-letter queue ``{name}.{group}.dlq`` of each of
  those groups that exists, deleted the same way (so its own DLQs go too). The
  records stay in the shared segments until the write nodes' compaction drops them
  (their queue id is never reused, so nothing reads them meanwhile).
- ``get``/``list`` read Redis (admin calls: always fresh); ``get`` reads the one queue's
  map entry, ``list`` the whole map.
- After every successful put/delete, ``on_queue_change(name, map in force)`` (the
  gateway's map cache re-reads the queue if it holds it, coalesced)
  or else ``on_change()`` runs, so the next produce through this process sees it.

A put that fails after the registry accepted it (e.g. Redis away) leaves the config
stored; repeating the put finishes the placement. Errors come out as ``common.errors``
(``metadata.api_errors.metadata_errors``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import mmh3

from vpq.common.errors import NotFound
from vpq.metadata.api_errors import metadata_errors
from vpq.metadata.queues import QueueRecord
from vpq.metadata.store import MetadataStore
from vpq.queue_admin.cluster_placement import lineage_repair_splits
from vpq.queue_admin.map_batcher import MapBatcher
from vpq.traffic.cluster_traffic import TrafficMeter

EMPTY_MAP: dict[str, Any] = {"epoch": 0, "queues": {}}
MAX_NAME = 128


def dead_letter_queue(queue: str, group: str) -> str:
    """The dead-letter queue of ``group`` on ``queue``: ``{queue}.{group}.dlq``, or, when
    that is longer than a name may be, both shortened and a hash of the pair added."""
    name = f"{queue}.{group}.dlq"
    if len(name) <= MAX_NAME:
        return name
    digest = mmh3.hash(f"{queue}/{group}", 0, signed=False)
    return f"{queue[:40]}.{group[:40]}.{digest:08x}.dlq"
QueueChange = Callable[[str, Mapping[str, Any]], Awaitable[None]]


class QueueAdmin:
    """See the module docstring. ``partitions()`` gives the pps new queues may be placed on
    (plus the pps the map already uses). After every successful put/delete,
    ``on_queue_change(name, map)`` runs when given, else ``on_change()``."""

    def __init__(
        self,
        md: MetadataStore,
        partitions: Callable[[], Sequence[int]],
        traffic: TrafficMeter,
        on_change: Callable[[], Awaitable[None]] | None = None,
        *,
        on_queue_change: QueueChange | None = None,
        log_ends: Callable[[], Awaitable[Mapping[int, int]]] | None = None,
    ) -> None:
        self._md = md
        self._traffic = traffic
        self._on_change = on_change
        self._on_queue_change = on_queue_change
        self.batcher = MapBatcher(md.maps, partitions, log_ends=log_ends)

    async def stop(self) -> None:
        """Fail the map changes still waiting (nothing to do when idle)."""
        await self.batcher.stop()

    # ------------------------------------------------------------------ answers
    def info(
        self, rec: QueueRecord, current: Mapping[str, Any], groups: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """The ``QueueInfo`` dict of ``rec`` under map ``current`` (with its consumer
        ``groups`` when given)."""
        placed = current["queues"].get(rec.name)
        extra = {} if groups is None else {"groups": list(groups)}
        return {
            "name": rec.name,
            "id": rec.id,
            **dict(rec.config),
            "epoch": int(current["epoch"]),
            "placement": list(placed["placement"]) if placed else [],
            "traffic": self._traffic.figures(rec.name),
            "created_ms": rec.created_ms,
            "updated_ms": rec.updated_ms,
            **extra,
        }

    async def _current(self) -> dict[str, Any]:
        return await self._md.maps.current() or dict(EMPTY_MAP)

    async def get(self, name: str) -> dict[str, Any]:
        with metadata_errors():
            rec = await self._md.queues.require(name)
            epoch, placed = await self._md.maps.entries([name])
            return self.info(rec, {"epoch": epoch, "queues": placed}, await self._md.groups.groups(name))

    async def list(self) -> list[dict[str, Any]]:
        with metadata_errors():
            records = await self._md.queues.list()
            current = await self._current()
        return [self.info(r, current) for r in records]

    # ------------------------------------------------------------------ changes
    async def put(self, name: str, config: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        with metadata_errors():
            rec, created = await self._md.queues.create_or_update(name, dict(config))
            current = await self.place(name, rec.virtual_partitions)
        await self._changed(name, current)
        return self.info(rec, current), created

    async def grow(self, name: str, queue_id: int, virtual_partitions: int) -> dict[str, Any]:
        """Raise ``name``'s virtual partitions to ``virtual_partitions`` while it is still the
        queue of id ``queue_id`` (``NotFound`` when it was deleted meanwhile, and nothing is
        created); ``Conflict`` when it already has more. Places it like ``put``."""
        with metadata_errors():
            rec = await self._md.queues.update_existing(name, {"virtual_partitions": virtual_partitions}, queue_id)
            current = await self.place(name, rec.virtual_partitions)
        await self._changed(name, current)
        return self.info(rec, current)

    async def delete(self, name: str) -> None:
        with metadata_errors():
            groups = set(await self._md.groups.groups(name))
            await self._md.queues.delete(name)
            current = await self.batcher.remove(name)
            await self._md.maps.delete_lineage(name)
            groups.update(await self._md.groups.groups(name))  # joined meanwhile
            for group in sorted(groups):
                await self._md.groups.delete_group(name, group)
        self._traffic.forget(name)
        await self._changed(name, current)
        for group in sorted(groups):
            dlq = dead_letter_queue(name, group)
            with metadata_errors():
                exists = await self._md.queues.get(dlq) is not None
            if exists:
                with contextlib.suppress(NotFound):  # deleted by someone else meanwhile
                    await self.delete(dlq)

    async def _changed(self, name: str, current: Mapping[str, Any]) -> None:
        with metadata_errors():
            if self._on_queue_change is not None:
                await self._on_queue_change(name, current)
            elif self._on_change is not None:
                await self._on_change()

    async def place(self, name: str, virtual_partitions: int) -> dict[str, Any]:
        """Make the map place ``name`` with ``virtual_partitions`` vps and its lineage
        complete; returns the map in force afterwards. See the module docstring."""
        current, lineage_complete = await self.batcher.place(name, virtual_partitions)
        if not lineage_complete:
            await self._complete_lineage(name, current)
        return current

    async def _complete_lineage(self, name: str, current: Mapping[str, Any]) -> None:
        placed = current["queues"].get(name)
        if placed is None:
            return
        v = int(placed["virtual_partitions"])
        maps = self._md.maps
        epoch = int(current["epoch"])
        present = {vp for vp in await maps.lineage_all(name) if vp < v}
        if len(present) == v:
            return
        for old_v in lineage_repair_splits(present, v):
            await maps.split_lineage(name, old_v, epoch)
        present = set(await maps.lineage_all(name))
        for vp in range(v):
            if vp not in present:
                await maps.open_range(name, vp, int(placed["placement"][vp]), 0, epoch)
