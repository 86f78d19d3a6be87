"""``Compactor``: the write node's periodic compaction of the partitions it serves.

At start and then every ``interval_s`` it reads a :class:`~vpq.write_nodes.retention.QueuePolicy` from
the queue registry (the last queue id given, then every live queue with its
``retention_ms``: ids are never reused, so a smaller id missing from the list is a
deleted queue) and runs ``PartitionLog.compact`` on each online partition, one after
the other. The policy also drives those logs' retention from then on (the write
node's logs delete no segment before they have one). A pass that
cannot read the registry is skipped (nothing is removed on a guess); an I/O error
takes that partition offline (``PartitionOwnership.mark_offline``: it reopens and
recovers), the others go on. ``run_once()`` runs one pass now (tests, benchmarks).
"""

from __future__ import annotations

import asyncio
import logging

from vpq.metadata.aio import cancel_and_wait
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.queues import QueueRegistry
from vpq.write_nodes.errors import LogIOError
from vpq.write_nodes.log_compaction import CompactionPass
from vpq.write_nodes.ownership import PartitionOwnership, State
from vpq.write_nodes.retention import QueuePolicy

log = logging.getLogger(__name__)


async def read_policy(queues: QueueRegistry) -> QueuePolicy:
    """The queue policy as the registry has it now (``MetadataUnavailable`` when it cannot)."""
    known_below = await queues.last_id()  # first: any id up to here existed before the list
    retention = {rec.id: int(rec.config.get("retention_ms", -1)) for rec in await queues.list()}
    return QueuePolicy(retention, known_below)


class Compactor:
    def __init__(self, queues: QueueRegistry, ownership: PartitionOwnership, interval_s: float) -> None:
        self._queues = queues
        self._ownership = ownership
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self.passes = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="write-node-compactor")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)

    async def _run(self) -> None:
        first = True
        while True:
            if not first:
                await asyncio.sleep(self._interval_s)
            first = False
            try:
                await self.run_once()
            except MetadataUnavailable as exc:
                log.warning("compaction skipped: %s", exc)
            except Exception:
                log.exception("compaction pass failed")

    async def run_once(self) -> CompactionPass:
        """One pass over every online partition; returns what it did in total."""
        policy = await read_policy(self._queues)
        total = CompactionPass()
        for part in self._ownership.held():
            plog = part.log
            if part.state is not State.ONLINE or plog is None or not plog.online:
                continue
            try:
                done = await plog.compact(policy)
            except LogIOError as exc:
                self._ownership.mark_offline(part, exc)
                continue
            total.segments += done.segments
            total.bytes_before += done.bytes_before
            total.bytes_after += done.bytes_after
            if done.segments:
                log.info(
                    "partition %d: compacted %d segments, %d -> %d bytes",
                    part.pp, done.segments, done.bytes_before, done.bytes_after,
                )
        self.passes += 1
        return total
