"""Replication of physical partitions across write nodes (``cluster.replication_factor`` >= 2).

The replicas of pp are the write nodes ``(pp + k) % write_nodes`` for k < R, its home
node first; each keeps its own copy in its own data directory. Contract of
:class:`ReplicaManager` (one per write node; ``start``/``stop``):

- Leadership: ``PartitionOwnership`` takes the lease ``pp:{pp}`` only when
  ``eligible(pp)`` (this node is an in-sync replica in the record and its copy has an
  epoch history, i.e. was not lost with its disk; or the record does not exist yet and
  this is the home node; or an operator's unclean election named it, record field
  ``forced``: then its copy is all there is, history or not); right after acquiring it,
  ``claim(pp)``
  stops this node's follower of pp and wins the leader epoch by compare-and-swap
  (``PartitionLeaders.elect``); when that fails the lease is given back. ``opened``
  (the log is open, before any append) appends (epoch, log end) to the durable epoch
  history and creates the :class:`LeaderState`; ``closed`` fails every waiter of it.
- Acks: ``state(pp)`` is the partition's ``LeaderState`` while this node leads it; an
  append is answered only once ``high_watermark`` passes it (every in-sync replica
  fsynced it), and refused with 503 ``not_enough_replicas`` below ``min_insync``.
- Followers: every ``interval_s`` a round starts a :class:`Follower` for each replica
  partition this node does not lead, and shrinks the in-sync set of the partitions it
  leads by the followers lagging over ``replica_lag_max_ms``. In-sync set changes go to
  Redis by compare-and-swap on (leader, epoch): a refused change means a newer epoch
  exists, and the partition is given up at once (``on_fenced``) so a stale leader never
  acknowledges anything.
- High watermark report: every ``hw_report_s`` the leader stores the watermark of each
  partition it leads in the record when it moved (``PartitionLeaders.report_hw``): an
  unclean election measures what it may lose from it.
- ``fetch`` serves the followers' fetch requests (``replica_handlers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from vpq.common.errors import Unavailable
from vpq.common.lifecycle import run_rounds
from vpq.config.settings import ClusterSettings, LogSettings
from vpq.metadata.aio import cancel_and_wait
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.leases import NodeRegistry
from vpq.metadata.partition_leaders import LeaderRecord, PartitionLeaders
from vpq.node_rpc.cluster_auth import client_headers
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.ownership import WRITE_ROLE, LogFactory, partition_dir
from vpq.write_nodes.replica_follower import Follower
from vpq.write_nodes.replica_leader import LeaderState
from vpq.write_nodes.replica_log import HISTORY_FILE, EpochHistory

log = logging.getLogger(__name__)

NOT_LEADER = "not_leader"
FENCED_EPOCH = "fenced_leader_epoch"


def replicas_of(pp: int, write_nodes: int, factor: int) -> tuple[int, ...]:
    """Write-node indexes holding pp, its home node first."""
    return tuple((pp + k) % write_nodes for k in range(min(factor, write_nodes)))


class ReplicaManager:
    def __init__(
        self,
        *,
        node_id: str,
        node_index: int,
        cluster: ClusterSettings,
        partition_count: int,
        partitions_dir: Path,
        log_settings: LogSettings,
        log_factory: LogFactory,
        leaders: PartitionLeaders,
        nodes: NodeRegistry,
        interval_s: float = 0.2,
        hw_report_s: float = 1.0,
        cluster_secret: str | None = None,
    ) -> None:
        self.node_id = node_id
        self._cluster_secret = cluster_secret
        self.me = node_index
        self.write_nodes = cluster.write_nodes
        self.factor = cluster.replication_factor
        self.min_insync = cluster.effective_min_insync
        self.lag_max_s = cluster.replica_lag_max_ms / 1000.0
        self.fetch_wait_ms = cluster.replica_fetch_wait_ms
        self.partition_count = partition_count
        self.partitions_dir = partitions_dir
        self._log_settings = log_settings
        self._log_factory = log_factory
        self.leaders = leaders
        self._nodes = nodes
        self._interval_s = interval_s
        self._hw_report_s = hw_report_s
        self._hw_reported: dict[int, tuple[int, int]] = {}  # pp -> (epoch, hw) stored
        self._hw_report_at = 0.0
        self._leading: set[int] = set()
        self._records: dict[int, LeaderRecord] = {}
        self._states: dict[int, LeaderState] = {}
        self.histories: dict[int, EpochHistory] = {}
        self._followers: dict[int, Follower] = {}
        self._addresses: dict[int, tuple[str, str]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._bg: set[asyncio.Task[Any]] = set()
        self.on_fenced: Callable[[int, str], Awaitable[None]] | None = None
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.truncations = 0  # of followers stopped since (the running ones count their own)
        self.unclean_elections = 0
        self.unclean_lost_offsets = 0

    # ---------------------------------------------------------------- queries
    def replicas(self, pp: int) -> tuple[int, ...]:
        return replicas_of(pp, self.write_nodes, self.factor)

    def is_replica(self, pp: int) -> bool:
        return self.me in self.replicas(pp)

    def state(self, pp: int) -> LeaderState | None:
        return self._states.get(pp)

    def node_name(self, index: int) -> str:
        known = self._addresses.get(index)
        return known[0] if known is not None else f"w{index}"

    # -------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self._session = aiohttp.ClientSession(headers=client_headers(self._cluster_secret))
        await self._refresh_nodes()
        self._task = asyncio.create_task(self._run(), name=f"replication-{self.node_id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        for t in list(self._bg):
            t.cancel()
        await asyncio.gather(*self._bg, return_exceptions=True)
        await asyncio.gather(*(f.stop() for f in self._followers.values()), return_exceptions=True)
        self._followers.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------- leadership
    async def eligible(self, pp: int) -> bool:
        if not self.is_replica(pp):
            return False
        rec = await self.leaders.get(pp)
        if rec is None:
            return self.replicas(pp)[0] == self.me
        if rec.forced == self.me:
            return True  # an operator's unclean election: this copy is all there is
        if rec.epoch > 0 and not (partition_dir(self.partitions_dir, pp) / HISTORY_FILE).exists():
            return False  # in sync by the record, yet without the history of its copy: its disk was lost
        return self.me in rec.isr

    async def claim(self, pp: int) -> bool:
        """Stop following pp and win its next leader epoch (see module doc)."""
        self._leading.add(pp)
        follower = self._followers.pop(pp, None)
        if follower is not None:
            await follower.stop()
            self.truncations += follower.truncations
        try:
            rec = await self.leaders.get(pp) or await self.leaders.create(pp, self.replicas(pp))
            new = await self.leaders.elect(pp, self.me, self.node_id, rec.epoch)
        except MetadataUnavailable as exc:
            log.warning("partition %d: cannot elect this node: %s", pp, exc)
            new = None
        if new is None:
            self._leading.discard(pp)
            return False
        if rec.forced == self.me and rec.unclean is not None:
            self.unclean_elections += 1
            self.unclean_lost_offsets += int(rec.unclean.get("lost_offsets", 0) or 0)
            log.warning("partition %d: leader by an unclean election, %s offsets may be lost", pp,
                        rec.unclean.get("lost_offsets"))
        self._records[pp] = new
        log.info("partition %d: leader with epoch %d, in sync %s", pp, new.epoch, list(new.isr))
        return True

    async def opened(self, pp: int, plog: PartitionLog) -> None:
        """The leader's log is open: record (epoch, end) in the history, then serve."""
        rec = self._records[pp]
        directory = partition_dir(self.partitions_dir, pp)
        loop = asyncio.get_running_loop()
        history = await loop.run_in_executor(None, EpochHistory.load, directory, plog.end_offset, plog.storage)
        if history.changed_by_assign(rec.epoch, plog.end_offset):
            await loop.run_in_executor(None, history.save)
        self.histories[pp] = history
        self._states[pp] = LeaderState(
            pp, self.me, rec.epoch, rec.replicas, rec.isr,
            lambda: plog.durable_end_offset, plog.wait_for, time.monotonic(), self.lag_max_s, self.min_insync,
        )

    def closed(self, pp: int) -> None:
        state = self._states.pop(pp, None)
        if state is not None:
            state.close(Unavailable(NOT_LEADER, f"write node {self.node_id} no longer leads partition {pp}", partition=pp))
        self._records.pop(pp, None)
        self.histories.pop(pp, None)
        self._leading.discard(pp)

    def expand(self, state: LeaderState, replica: int) -> None:
        """Add a caught-up follower: in memory first, then in Redis."""
        if replica in state.isr or state.closed is not None:
            return
        new = set(state.isr) | {replica}
        state.set_isr(new)
        self.isr_expands += 1
        log.info("partition %d: replica %d back in sync, in sync %s", state.pp, replica, sorted(new))
        self._spawn(self._store_isr(state, new))

    async def _store_isr(self, state: LeaderState, isr: set[int]) -> bool:
        try:
            ok = await self.leaders.set_isr(state.pp, self.me, state.epoch, isr)
        except MetadataUnavailable as exc:
            log.warning("partition %d: cannot store the in-sync set: %s", state.pp, exc)
            return False
        if not ok:
            why = f"leader epoch {state.epoch} of partition {state.pp} is superseded"
            log.warning("%s: giving the partition up", why)
            state.close(Unavailable(FENCED_EPOCH, why, partition=state.pp))
            if self.on_fenced is not None:
                await self.on_fenced(state.pp, why)
        return ok

    async def drop(self, state: LeaderState, replica: int, why: str) -> None:
        await self._shrink(state, [replica], why)

    async def _shrink(self, state: LeaderState, out: list[int], why: str = "lagging") -> None:
        new = set(state.isr) - set(out)
        if await self._store_isr(state, new) and state.closed is None:
            state.set_isr(new)
            state.follower_end.update((r, 0) for r in out)
            self.isr_shrinks += 1
            log.warning("partition %d: replicas %s left the in-sync set (%s), in sync %s", state.pp, out, why, sorted(new))

    # ------------------------------------------------------------------ rounds
    async def _run(self) -> None:
        await run_rounds(self._interval_s, self.tick, log, "replication", (MetadataUnavailable, OSError))

    async def tick(self) -> None:
        now = time.monotonic()
        for state in list(self._states.values()):
            lagging = state.lagging(now)
            if lagging and state.closed is None:
                await self._shrink(state, lagging)
        if now - self._hw_report_at >= self._hw_report_s:
            self._hw_report_at = now
            await self._report_watermarks()
        for pp in range(self.partition_count):
            if not self.is_replica(pp) or pp in self._leading or pp in self._followers:
                continue
            assert self._session is not None
            follower = Follower(
                pp, self.me, self.node_id, self.partitions_dir, self._log_settings, self._log_factory,
                self.leaders, self.locate, self._session, self.fetch_wait_ms, forget=self.forget_address,
            )
            self._followers[pp] = follower
            await follower.start()

    async def _report_watermarks(self) -> None:
        for pp, state in list(self._states.items()):
            hw = state.high_watermark
            if state.closed is not None or self._hw_reported.get(pp) == (state.epoch, hw):
                continue
            if await self.leaders.report_hw(pp, self.me, state.epoch, hw):
                self._hw_reported[pp] = (state.epoch, hw)

    async def locate(self, index: int) -> str | None:
        known = self._addresses.get(index)
        if known is None:
            await self._refresh_nodes()
            known = self._addresses.get(index)
        return known[1] if known is not None else None

    async def _refresh_nodes(self) -> None:
        with contextlib.suppress(MetadataUnavailable):
            for node in await self._nodes.nodes(WRITE_ROLE):
                index = node.meta.get("index") if isinstance(node.meta, dict) else None
                if isinstance(index, int):
                    self._addresses[index] = (node.node_id, node.address)

    def forget_address(self, index: int) -> None:
        self._addresses.pop(index, None)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    # ---------------------------------------------------------------- listing
    def counters(self) -> dict[str, int]:
        return {
            "isr_shrinks": self.isr_shrinks,
            "isr_expands": self.isr_expands,
            "truncations": self.truncations + sum(f.truncations for f in self._followers.values()),
            "unclean_elections": self.unclean_elections,
            "unclean_lost_offsets": self.unclean_lost_offsets,
        }

    def follower_rows(self) -> list[dict[str, Any]]:
        return [f.snapshot() for _, f in sorted(self._followers.items())]

    def leader_row(self, pp: int) -> dict[str, Any]:
        state = self._states.get(pp)
        if state is None:
            return {}
        return {
            "leader_epoch": state.epoch,
            "replicas": [self.node_name(r) for r in state.replicas],
            "in_sync_replicas": [self.node_name(r) for r in sorted(state.isr)],
            "high_watermark": state.high_watermark,
            "replica_lag": {self.node_name(r): state.lag(r) for r in state.replicas if r != self.me},
        }
