"""``GroupExpiry``: a group's view of its queue's ``retention_ms`` and its ``expired`` count.

A message whose record timestamp is older than ``now - retention_ms`` (wall clock;
only when ``retention_ms`` > 0) is past retention: the group never delivers it.
Every message the group skips that way, or finds removed from the log before it
got it, is counted once: in the metric at once, in the group record
(``GroupStore.add_expired``) on the next ``flush``, so the count survives a move
of the group to another read node. ``total`` is what the group answer shows.
"""

from __future__ import annotations

from vpq.metadata.groups import GroupStore
from vpq.read_nodes.metrics import DeliveryCounters
from vpq.read_nodes.node_parts import wall_ms


class GroupExpiry:
    def __init__(self, groups: GroupStore, queue: str, group: str, retention_ms: int, counters: DeliveryCounters) -> None:
        self._groups = groups
        self._queue = queue
        self._group = group
        self.retention_ms = retention_ms
        self._counters = counters
        self.pending = 0
        """counted here, not yet added to the group record"""

    def cutoff(self) -> int | None:
        """Wall-clock ms: a message with an older timestamp is past retention."""
        return wall_ms() - self.retention_ms if self.retention_ms > 0 else None

    def add(self, n: int) -> None:
        if n:
            self.pending += n
            self._counters.expired(self._queue, self._group, n)

    async def flush(self) -> None:
        """Add the pending count to the group record (``MetadataUnavailable`` keeps it pending)."""
        n = self.pending
        if n:
            await self._groups.add_expired(self._queue, self._group, n)
            self.pending -= n

    async def total(self) -> int:
        rec = await self._groups.get_group(self._queue, self._group)
        return (rec.expired if rec is not None else 0) + self.pending
