"""Finding nodes: which write node owns a physical partition, which read node serves a group.

Both directories read the Redis node registry (``metadata.leases.NodeRegistry``) and keep
what they learn in memory, so the hot paths (``WriteNodeDirectory.cached``,
``ReadNodeDirectory.node_for`` on a known group) do no I/O. Nothing here depends on the
gateway: read nodes may use ``WriteNodeDirectory`` to dead-letter through the appender.

Write side: the owner of pp ``n`` is the holder of the lease ``pp:{n}``, its address the
one it registered under role ``write``, and, with ``leaders`` (replicated partitions), the
leader epoch of the pp's leadership record, which appends carry so that a node leading at
another epoch refuses them. A lease held by a node that is no longer registered counts as
no owner. ``refresh()`` reloads every known pp in two round trips (lease owners in one
pipeline, then the live nodes; a third for the leader epochs with ``leaders``); callers refresh after ``not_owner``
or a connection error (``invalidate``), and node announcements refresh it too.

Read side: the read node for group ``g`` of queue ``q`` is chosen by rendezvous hashing
(``rendezvous_pick``) of ``"{q}/{g}"`` over the live read nodes, so every gateway picks
the same node and a node leaving only moves its own groups. When a read node answers 409
``not_owner`` with detail ``owner``, ``learn_owner`` remembers that owner for the group
instead; ``node_down`` takes a node that could not be reached out of the choice for a
while (until it re-registers or ``down_ttl_s`` has passed).

Concurrent refreshes are coalesced: callers that asked while a refresh was running share
its result instead of starting another one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import mmh3

from vpq.common.errors import Unavailable
from vpq.metadata.api_errors import metadata_errors
from vpq.metadata.leases import LeaseManager, NodeRegistry, pp_resource
from vpq.metadata.partition_leaders import PartitionLeaders

WRITE_ROLE = "write"
READ_ROLE = "read"


class NodeRef(NamedTuple):
    """A live node: its registered id and ``host:port`` address; for the owner of a
    replicated pp, the leader epoch of its record (-1 otherwise)."""

    node_id: str
    address: str
    leader_epoch: int = -1


def rendezvous_score(key: str, node_id: str) -> int:
    """The weight of ``node_id`` for ``key``: 64-bit MurmurHash3 of ``node_id + "\\0" + key``."""
    return mmh3.hash64(f"{node_id}\0{key}", 0, signed=False)[0]


def rendezvous_pick(key: str, node_ids: Iterable[str]) -> str | None:
    """The node with the highest ``rendezvous_score`` for ``key`` (ties: the larger id);
    None when there is none. Pure and deterministic: every process agrees."""
    best: tuple[int, str] | None = None
    for node in node_ids:
        cand = (rendezvous_score(key, node), node)
        if best is None or cand > best:
            best = cand
    return best[1] if best is not None else None


def group_key(queue: str, group: str) -> str:
    """The rendezvous key of a consumer group: ``"{queue}/{group}"``."""
    return f"{queue}/{group}"


class _Coalescer:
    """Runs one refresh at a time; a caller that arrives while one runs waits for it and
    does not start another (the generation moved on)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self.generation = 0

    async def run(self, fn: Callable[[], Any], force: bool) -> None:
        seen = self.generation
        async with self._lock:
            if not force and self.generation != seen:
                return
            await fn()
            self.generation += 1


class WriteNodeDirectory:
    """pp -> owning write node; see the module docstring.

    ``partition_count`` pps (``0 .. K-1``) are always tracked; any other pp asked about
    is tracked from then on."""

    def __init__(
        self, nodes: NodeRegistry, leases: LeaseManager, partition_count: int, leaders: PartitionLeaders | None = None
    ) -> None:
        self._nodes = nodes
        self._leases = leases
        self._leaders = leaders
        self._known: set[int] = set(range(int(partition_count)))
        self._owner: dict[int, NodeRef] = {}
        self._live: dict[str, str] = {}
        self._coalescer = _Coalescer()

    @property
    def partitions(self) -> list[int]:
        """Every pp tracked, ascending."""
        return sorted(self._known)

    def cached(self, pp: int) -> NodeRef | None:
        """The owner of ``pp`` as last seen (no I/O); None when unknown or unowned."""
        return self._owner.get(pp)

    def owners(self) -> dict[int, NodeRef | None]:
        """Every tracked pp and its owner as last seen (no I/O)."""
        return {pp: self._owner.get(pp) for pp in sorted(self._known)}

    def live_nodes(self) -> dict[str, str]:
        """Live write nodes as last seen: node id -> address (no I/O)."""
        return dict(self._live)

    async def owner(self, pp: int) -> NodeRef:
        """The owner of ``pp``, refreshing once on a miss; ``Unavailable``
        (``partition_unowned``) when no live write node holds it."""
        ref = self._owner.get(pp)
        if ref is not None:
            return ref
        self._known.add(int(pp))
        await self.refresh(force=False)
        ref = self._owner.get(pp)
        if ref is None:
            raise Unavailable(
                "partition_unowned", f"no live write node owns physical partition {pp} yet", retry_after=1.0, partition=pp
            )
        return ref

    def invalidate(self, pp: int) -> None:
        """Forget the owner of ``pp`` (after ``not_owner`` or a connection error)."""
        self._owner.pop(pp, None)

    async def refresh(self, force: bool = True) -> None:
        """Reload the owners of every tracked pp (two Redis round trips); Redis trouble is
        ``Unavailable`` (``metadata_unavailable``)."""
        with metadata_errors():
            await self._coalescer.run(self._load, force)

    async def _load(self) -> None:
        pps = sorted(self._known)
        leases = await self._leases.owners(pp_resource(pp) for pp in pps)
        epochs = await self._leaders.epochs(pps) if self._leaders is not None else {}
        live = {n.node_id: n.address for n in await self._nodes.nodes(WRITE_ROLE)}
        owner: dict[int, NodeRef] = {}
        for pp in pps:
            lease = leases.get(pp_resource(pp))
            if lease is not None and lease.node_id in live:
                owner[pp] = NodeRef(lease.node_id, live[lease.node_id], epochs.get(pp, -1))
        self._owner = owner
        self._live = live

    async def on_event(self, event: dict[str, Any]) -> None:
        """``EventListener`` callback: node (de)registrations and resyncs reload."""
        if event.get("type") == "resync" or (event.get("type") == "node" and event.get("role") == WRITE_ROLE):
            await self.refresh()


class ReadNodeDirectory:
    """(queue, group) -> read node; see the module docstring.

    ``max_groups`` bounds the per-group cache (it is cleared when full: entries are cheap
    to recompute). ``clock`` (seconds, monotonic) is injectable for tests."""

    def __init__(
        self,
        nodes: NodeRegistry,
        *,
        down_ttl_s: float = 10.0,
        max_groups: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nodes = nodes
        self._down_ttl_s = down_ttl_s
        self._max_groups = max_groups
        self._clock = clock
        self._live: dict[str, str] = {}
        self._down: dict[str, float] = {}
        self._groups: dict[tuple[str, str], str] = {}
        self._loaded = False
        self._coalescer = _Coalescer()

    def live_nodes(self) -> dict[str, str]:
        """Live read nodes as last seen: node id -> address (no I/O)."""
        return dict(self._live)

    def _candidates(self) -> list[str]:
        now = self._clock()
        for node, until in list(self._down.items()):
            if until <= now:
                del self._down[node]
        up = [n for n in self._live if n not in self._down]
        return up or list(self._live)

    async def node_for(self, queue: str, group: str) -> NodeRef:
        """The read node to ask about the group: the learned owner, else the rendezvous
        choice among live nodes; ``Unavailable`` (``no_read_nodes``) when there is none."""
        if not self._loaded:
            await self.refresh(force=False)
        node = self._groups.get((queue, group))
        if node is not None and node in self._live:
            return NodeRef(node, self._live[node])
        picked = rendezvous_pick(group_key(queue, group), self._candidates())
        if picked is None:
            await self.refresh(force=False)
            picked = rendezvous_pick(group_key(queue, group), self._candidates())
        if picked is None:
            raise Unavailable("no_read_nodes", "no read node is registered", retry_after=1.0)
        self._remember(queue, group, picked)
        return NodeRef(picked, self._live[picked])

    async def learn_owner(self, queue: str, group: str, owner: str) -> NodeRef | None:
        """Remember that ``owner`` serves the group (from a 409 ``not_owner``); its ref, or
        None when no such node is live even after a refresh."""
        if owner not in self._live:
            await self.refresh(force=False)
        if owner not in self._live:
            self._groups.pop((queue, group), None)
            return None
        self._remember(queue, group, owner)
        return NodeRef(owner, self._live[owner])

    def node_down(self, node_id: str) -> None:
        """``node_id`` could not be reached: leave it out of rendezvous for ``down_ttl_s``
        and forget the groups it served."""
        self._down[node_id] = self._clock() + self._down_ttl_s
        self._groups = {k: v for k, v in self._groups.items() if v != node_id}

    def forget(self, queue: str, group: str) -> None:
        self._groups.pop((queue, group), None)

    def _remember(self, queue: str, group: str, node: str) -> None:
        if len(self._groups) >= self._max_groups:
            self._groups.clear()
        self._groups[(queue, group)] = node

    async def refresh(self, force: bool = True) -> None:
        """Reload the live read nodes (one Redis round trip); Redis trouble is
        ``Unavailable`` (``metadata_unavailable``)."""
        with metadata_errors():
            await self._coalescer.run(self._load, force)

    async def _load(self) -> None:
        fresh = {n.node_id: n.address for n in await self._nodes.nodes(READ_ROLE)}
        # a node that (re-)registered since it was marked down is worth trying again
        for node in [n for n in self._down if n in fresh and n not in self._live]:
            del self._down[node]
        self._live = fresh
        self._groups = {k: v for k, v in self._groups.items() if v in fresh}
        self._loaded = True

    async def on_event(self, event: dict[str, Any]) -> None:
        """``EventListener`` callback: node (de)registrations and resyncs reload."""
        if event.get("type") == "resync" or (event.get("type") == "node" and event.get("role") == READ_ROLE):
            await self.refresh()
