"""Queue administration against the metadata store: registry, placement map, lineage.

``QueueAdmin`` implements the queue half of the gateway's ``Backend``:

- ``put(name, config)``: ``QueueRegistry.create_or_update`` (V may only grow: 409), then
  ``place(name, V)``. Answers ``(QueueInfo dict, created)``.
- ``place(name, V)`` (idempotent; safe to run concurrently from several gateways):

  * queue not in the map: compute its placement (``cluster_placement.plan_new_queue``),
    open the lineage range ``(pp, 0)`` of every vp at the CURRENT map epoch, then publish
    the map with the queue added at the next epoch (compare-and-swap, retried on conflict).
    Lineage is written first so that a map never places a vp without lineage; concurrent
    creators agree through it (the first open range of a vp wins, the map takes the pps
    the lineage holds). Lineage left by an earlier queue of the same name that is not a
    clean creation (several ranges, sealed ranges, vps beyond V) is dropped first.
  * queue placed with fewer vps than V: publish the split placement (CAS), then copy the
    lineage of each parent vp to its children (``split_lineage``, at the published epoch).
  * in every case, finally, fill any vp still missing lineage (a crash between a publish
    and its lineage copy): splits first (``lineage_repair_splits``), then ``(pp, 0)``.

- ``delete(name)``: registry entry, then the map entry (CAS), the lineage, every group
  and its ack state.
- ``get``/``list`` read Redis (admin calls: always fresh).

A put that fails after the registry accepted it (e.g. Redis away) leaves the config
stored; repeating the put finishes the placement. Errors come out as ``common.errors``
(``cluster_errors.metadata_errors``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from common.errors import Unavailable
from gateway.cluster_errors import RETRY_AFTER_S, metadata_errors
from gateway.cluster_placement import grow_queue, lineage_repair_splits, plan_new_queue, with_queue, without_queue
from gateway.cluster_traffic import TrafficMeter
from metadata.maps import LineageRange
from metadata.queues import QueueRecord
from metadata.store import MetadataStore

EMPTY_MAP: dict[str, Any] = {"epoch": 0, "queues": {}}


def _clean_creation(lineage: Mapping[int, list[LineageRange]], virtual_partitions: int) -> bool:
    """True when ``lineage`` is what a (possibly concurrent, possibly interrupted) creation
    leaves: at most one open range from offset 0 per vp, only vps below V."""
    for vp, ranges in lineage.items():
        if vp >= virtual_partitions or len(ranges) != 1:
            return False
        if ranges[0].to_offset is not None or ranges[0].from_offset != 0:
            return False
    return True


class QueueAdmin:
    """See the module docstring. ``partitions()`` gives the pps new queues may be placed on;
    ``on_change()`` runs after every successful put/delete (the backend refreshes its map
    cache there, so the next produce through this process sees the change)."""

    def __init__(
        self,
        md: MetadataStore,
        partitions: Callable[[], Sequence[int]],
        traffic: TrafficMeter,
        on_change: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._md = md
        self._partitions = partitions
        self._traffic = traffic
        self._on_change = on_change

    # ------------------------------------------------------------------ answers
    def info(self, rec: QueueRecord, current: Mapping[str, Any]) -> dict[str, Any]:
        """The ``QueueInfo`` dict of ``rec`` under map ``current``."""
        placed = current["queues"].get(rec.name)
        return {
            "name": rec.name,
            "id": rec.id,
            **dict(rec.config),
            "epoch": int(current["epoch"]),
            "placement": list(placed["placement"]) if placed else [],
            "traffic": self._traffic.figures(rec.name),
            "created_ms": rec.created_ms,
            "updated_ms": rec.updated_ms,
        }

    async def _current(self) -> dict[str, Any]:
        return await self._md.maps.current() or dict(EMPTY_MAP)

    async def get(self, name: str) -> dict[str, Any]:
        with metadata_errors():
            rec = await self._md.queues.require(name)
            return self.info(rec, await self._current())

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
        await self._changed()
        return self.info(rec, current), created

    async def delete(self, name: str) -> None:
        with metadata_errors():
            await self._md.queues.delete(name)
            await self._md.maps.update(lambda m: self._removal(m, name))
            await self._md.maps.delete_lineage(name)
            for group in await self._md.groups.groups(name):
                await self._md.groups.delete_group(name, group)
                await self._md.acks.delete_group(name, group)
        self._traffic.forget(name)
        await self._changed()

    @staticmethod
    def _removal(m: dict[str, Any], name: str) -> dict[str, Any] | None:
        queues = without_queue(m["queues"], name)
        return None if queues is None else {"queues": queues}

    async def _changed(self) -> None:
        if self._on_change is not None:
            with metadata_errors():
                await self._on_change()

    async def place(self, name: str, virtual_partitions: int) -> dict[str, Any]:
        """Make the map place ``name`` with ``virtual_partitions`` vps and its lineage
        complete; returns the map in force afterwards. See the module docstring."""
        current = await self._current()
        if name not in current["queues"]:
            current = await self._create(name, virtual_partitions, current)
        placed = current["queues"].get(name)
        if placed is not None and placed["virtual_partitions"] < virtual_partitions:
            current = await self._md.maps.update(lambda m: self._growth(m, name, virtual_partitions))
        await self._complete_lineage(name, current)
        return current

    @staticmethod
    def _growth(m: dict[str, Any], name: str, virtual_partitions: int) -> dict[str, Any] | None:
        if name not in m["queues"]:
            return None
        grown = grow_queue(m["queues"], name, virtual_partitions)
        return None if grown is None else {"queues": grown[0]}

    async def _create(self, name: str, virtual_partitions: int, current: dict[str, Any]) -> dict[str, Any]:
        maps = self._md.maps
        lineage = await maps.lineage_all(name)
        if lineage and not _clean_creation(lineage, virtual_partitions):
            await maps.delete_lineage(name)
            lineage = {}
        keep = {vp: ranges[0].pp for vp, ranges in lineage.items()}
        pps = sorted(set(self._partitions()))
        plan = plan_new_queue(current["queues"], name, virtual_partitions, pps, keep)
        for vp in range(virtual_partitions):
            if vp not in lineage:
                await maps.open_range(name, vp, plan[vp], 0, int(current["epoch"]))
        lineage = await maps.lineage_all(name)
        if any(vp not in lineage for vp in range(virtual_partitions)):
            raise Unavailable(
                "placement_conflict", f"queue {name!r} is being placed concurrently; retry", retry_after=RETRY_AFTER_S
            )
        placement = [lineage[vp][0].pp for vp in range(virtual_partitions)]

        def add(m: dict[str, Any]) -> dict[str, Any] | None:
            if name in m["queues"]:
                return None  # placed meanwhile (by a concurrent creator, from the same lineage)
            return {"queues": with_queue(m["queues"], name, placement)}

        return await maps.update(add)

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
