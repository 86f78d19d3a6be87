"""Group commit of placement-map changes: the queue admin's writer of the map.

Every queue PUT (creation, growth) and DELETE changes the placement map, one compare-and-
swap on the map's epoch each (``MapStore.publish_changes``; the map is stored per queue,
``metadata.map_entries``). ``MapBatcher`` gathers the changes that arrive while a commit
is under way and publishes them together, like a journal's group commit:

- ``place(name, V)`` / ``remove(name)`` queue a request and wait for the publish that
  includes it. Both answer the map in force afterwards restricted to the commit's
  queues, ``{"epoch", "queues": {name: entry}}`` (``place`` also says whether the commit
  created the queue from lineage it read back complete).
- One commit runs at a time, on a task started on demand that ends when nothing is
  pending; ``stop()`` cancels it and fails what it held (``Unavailable``). A commit takes
  pending requests in arrival order, at most ``max_batch`` and at most one per queue
  name (a later request for a name waits for the next commit, so per-name order holds).
  A request whose waiter was cancelled before its commit is dropped.
- A commit reads what it needs in one round trip (``MapStore.commit_base``): the epoch,
  the entries of its own queues and the vps per pp; nothing it does depends on the
  number of queues in the map. A lost CAS (another gateway, the remap job) makes it
  read again (at most ``max_attempts`` times, then ``MapConflictError``).
- Lineage first (the rule of ``queue_admin.cluster_queues``), for all creations of a commit
  at once: read their lineage (one round trip), drop lineage that is not a clean
  creation, plan each placement against the stored load plus the queues planned before it
  in the same commit, open every missing vp at the read epoch and read lineage back
  (one round trip), and take the pps the lineage holds. A queue whose lineage is still
  incomplete (a concurrent creator in another process got there first with another
  plan and has not finished) fails alone with a retryable 503 ``placement_conflict``.
- Then all edits go into ONE publish at epoch + 1 (``cluster_placement.apply_edits``
  on the commit's entries; only the entries that differ are written).

Redis errors reach every waiter of the commit as they are (the admin maps them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from vpq.common.errors import Unavailable
from vpq.metadata.aio import cancel_and_wait
from vpq.metadata.map_entries import changes_between
from vpq.metadata.map_history import queue_changes, queues_note
from vpq.metadata.maps import LineageRange, MapConflictError, MapStore
from vpq.queue_admin.cluster_placement import (
    MapEdit,
    add_load,
    apply_edits,
    clean_creation,
    plan_placement,
)

log = logging.getLogger("vpq.queue_admin.map_batcher")
RETRY_AFTER_S = 1.0


class Placed(NamedTuple):
    """The answer to ``place``: the map in force after the commit, and True when that
    commit created the queue from complete lineage (no lineage check left to do)."""

    map: dict[str, Any]
    lineage_complete: bool


@dataclass(eq=False)
class _Request:
    kind: str  # "place" | "remove"
    name: str
    virtual_partitions: int
    future: asyncio.Future[Any] = field(repr=False)


class MapBatcher:
    """See the module docstring. ``partitions()`` gives the pps new queues may be placed
    on (the pps the map already uses are added to it)."""

    def __init__(
        self,
        maps: MapStore,
        partitions: Callable[[], Sequence[int]],
        *,
        max_batch: int = 256,
        max_attempts: int = 32,
        log_ends: Callable[[], Awaitable[Mapping[int, int]]] | None = None,
    ) -> None:
        if max_batch < 1 or max_attempts < 1:
            raise ValueError("max_batch and max_attempts must be >= 1")
        self._maps = maps
        self._partitions = partitions
        self._log_ends = log_ends
        self._max_batch = max_batch
        self._max_attempts = max_attempts
        self._pending: list[_Request] = []
        self._task: asyncio.Task[None] | None = None
        self.commits = 0
        self.publishes = 0

    async def place(self, name: str, virtual_partitions: int) -> Placed:
        return await self._submit("place", name, virtual_partitions)

    async def remove(self, name: str) -> dict[str, Any]:
        return await self._submit("remove", name, 0)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        self._fail(self._pending, Unavailable("not_ready", "the queue admin is stopping", retry_after=RETRY_AFTER_S))
        self._pending = []

    # ------------------------------------------------------------------ internals
    async def _submit(self, kind: str, name: str, virtual_partitions: int) -> Any:
        req = _Request(kind, name, virtual_partitions, asyncio.get_running_loop().create_future())
        self._pending.append(req)
        if self._task is None:
            self._task = asyncio.create_task(self._drain(), name="vpq-map-batcher")
        return await req.future

    @staticmethod
    def _fail(requests: Sequence[_Request], exc: BaseException) -> None:
        for r in requests:
            if not r.future.done():
                r.future.set_exception(exc)

    def _take(self) -> list[_Request]:
        """The next commit's requests (see the module docstring); the rest stay pending."""
        batch: list[_Request] = []
        names: set[str] = set()
        rest: list[_Request] = []
        for r in self._pending:
            if r.future.done():
                continue
            if len(batch) < self._max_batch and r.name not in names:
                batch.append(r)
            else:
                rest.append(r)
            names.add(r.name)
        self._pending = rest
        return batch

    async def _drain(self) -> None:
        batch: list[_Request] = []
        try:
            while self._pending:
                batch = self._take()
                if batch:
                    try:
                        await self._commit(batch)
                    except Exception as exc:  # every waiter of the commit gets it
                        self._fail(batch, exc)
                batch = []
        except asyncio.CancelledError:
            self._fail(batch, Unavailable("not_ready", "the queue admin is stopping", retry_after=RETRY_AFTER_S))
            raise
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _commit(self, batch: list[_Request]) -> None:
        self.commits += 1
        todo = batch
        for _ in range(self._max_attempts):
            epoch, placed, load = await self._maps.commit_base(r.name for r in todo)
            creating = [r for r in todo if r.kind == "place" and r.name not in placed]
            placements = await self._lineage_first(creating, epoch, load) if creating else {}
            for r in creating:
                if r.name not in placements:
                    self._fail([r], Unavailable(
                        "placement_conflict", f"queue {r.name!r} is being placed concurrently; retry",
                        retry_after=RETRY_AFTER_S,
                    ))
            todo = [r for r in todo if not r.future.done()]
            edits = [MapEdit(r.kind, r.name, r.virtual_partitions, placements.get(r.name)) for r in todo]
            nxt, _load, changed = apply_edits(placed, load, edits)
            if not changed:
                self._resolve(todo, {"epoch": epoch, "queues": placed}, set())
                return
            # checked: stored entries were published before, new ones built by QueuePlacement
            note = queues_note(queue_changes(placed, nxt, (e.queue for e in edits)))
            if await self._maps.publish_changes(changes_between(placed, nxt), epoch, checked=True, note=note):
                self.publishes += 1
                self._resolve(todo, {"epoch": epoch + 1, "queues": nxt}, set(placements))
                return
        raise MapConflictError(f"placement map update lost the epoch race {self._max_attempts} times")

    @staticmethod
    def _resolve(requests: Sequence[_Request], m: dict[str, Any], created: set[str]) -> None:
        for r in requests:
            if r.future.done():
                continue
            r.future.set_result(Placed(m, r.name in created) if r.kind == "place" else m)

    async def _starts(self) -> Mapping[int, int]:
        """Where new queues' ranges start per pp: the log ends (``queue_admin.log_ends``),
        read before the map that places them is published; {} (offset 0) when unknown."""
        if self._log_ends is None:
            return {}
        try:
            return await self._log_ends()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # best effort: offset 0 is always correct
            log.info("log end offsets unavailable (%s); new queues' lineage starts at 0", exc)
            return {}

    async def _lineage_first(
        self, creating: Sequence[_Request], epoch: int, load: dict[int, int]
    ) -> dict[str, tuple[int, ...]]:
        """Open the lineage of every queue of ``creating`` (see the module docstring);
        the placement each one's lineage holds, for those whose lineage is complete."""
        maps = self._maps
        found = await maps.lineage_many(r.name for r in creating)
        stale = [r.name for r in creating if found[r.name] and not clean_creation(found[r.name], r.virtual_partitions)]
        if stale:
            await maps.delete_lineages(stale)
            found.update({name: {} for name in stale})
        pps = sorted(set(self._partitions()) | set(load))
        planned = dict(load)
        opens: list[tuple[str, int, int]] = []
        for r in creating:
            keep = {vp: ranges[0].pp for vp, ranges in found[r.name].items()}
            plan = plan_placement(r.name, r.virtual_partitions, pps, planned, keep)
            add_load(planned, plan)
            opens += [(r.name, vp, pp) for vp, pp in enumerate(plan) if vp not in found[r.name]]
        lineage: dict[str, dict[int, list[LineageRange]]] = dict(found)
        if opens:
            lineage.update(await maps.open_ranges(opens, epoch, await self._starts()))
        out: dict[str, tuple[int, ...]] = {}
        for r in creating:
            lin = lineage[r.name]
            if all(vp in lin for vp in range(r.virtual_partitions)):
                out[r.name] = tuple(lin[vp][0].pp for vp in range(r.virtual_partitions))
        return out
