"""Power-loss campaign: a real write node on a simulated disk, real HTTP producers,
power failures at random points, reboot, and the delivery check.

:class:`SimulatedWriteNode` is one ``WriteNodeService`` whose partition files live on
a :class:`~write_nodes.sim_disk.SimDisk` (its lock files, statistics and metadata
stay real). ``power_loss`` drops what the disk had not fsynced and stops the process
state without a clean close (leases kept, as after a crash); ``boot`` starts a new
service on the surviving disk, which recovers the logs. A replication test can run
several of them, one disk each, on one Redis.

:class:`PowerLossCampaign` repeats, ``crash_points`` times: arm a crash point
(:func:`plan_crash`), run ``producers`` concurrent HTTP producers (each sends one
magic-2 batch at a time through the multi-partition append the produce path uses,
and records the acknowledged offsets) until the power fails, reboot,
read the whole partition back over HTTP and check it (``load.powerloss_check``):
every message acknowledged in any round is still there, at its offset, in order.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import Record, decode_batches
from vpq.common.errors import VpqError
from vpq.config.settings import ClusterSettings, LogSettings, RebalanceSettings, RedisSettings, Settings
from vpq.load.powerloss_check import DeliveryCheck, check_delivery, message_value
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.append_frames import Frame
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.write_nodes.service import PARTITIONS_SUBDIR, WriteNodeService
from vpq.write_nodes.sim_disk import CrashMode, SimDisk, SimOp

QUEUE = "powerloss"
PARTITION = 0
CRASH_KINDS = ("ops", "group", "roll", "timer")
_MAX_N = {"ops": 120, "group": 30, "roll": 6}  # the largest n of each op-driven kind


@dataclass(frozen=True, slots=True)
class CrashPoint:
    """Where the power fails in one round.

    - ``ops``: right before the ``n``-th mutating disk call of the round (any write,
      fsync, rename, create, unlink: inside group commits, index writes, checkpoints);
    - ``group``: right before the ``n``-th fsync of a segment file, i.e. between a
      group commit's write and its fsync;
    - ``roll``: ``n`` disk calls after the next segment file is created;
    - ``timer``: at ``delay_s`` seconds, whatever the disk is doing.
    ``mode``: what survives of the unsynced state (``SimDisk.power_loss``)."""

    kind: str
    n: int
    delay_s: float
    mode: CrashMode


def plan_crash(rng: random.Random) -> CrashPoint:
    """A random crash point (each kind equally likely, half of them ``lazy``)."""
    kind = rng.choice(CRASH_KINDS)
    mode: CrashMode = "lazy" if rng.random() < 0.5 else "strict"
    if kind == "timer":
        return CrashPoint(kind, 0, rng.uniform(0.005, 0.25), mode)
    return CrashPoint(kind, rng.randint(1, _MAX_N[kind]), 0.0, mode)


def trigger_for(point: CrashPoint) -> Callable[[SimOp], bool] | None:
    """The ``SimDisk.arm`` trigger of an op-driven crash point (``None`` for ``timer``)."""
    seen = {"ops": 0, "fsyncs": 0, "after_roll": -1}

    def fire(op: SimOp) -> bool:
        seen["ops"] += 1
        if point.kind == "ops":
            return seen["ops"] >= point.n
        if point.kind == "group":
            if op.kind == "fsync" and op.path.endswith(".log"):
                seen["fsyncs"] += 1
            return seen["fsyncs"] >= point.n
        if seen["after_roll"] >= 0:
            seen["after_roll"] += 1
            return seen["after_roll"] >= point.n
        if op.kind == "create" and op.path.endswith(".log"):
            seen["after_roll"] = 0
        return False

    return None if point.kind == "timer" else fire


def campaign_settings(data_dir: Path, key_prefix: str) -> Settings:
    """One write node, one partition, 4 KiB segments (many rolls), frequent checkpoints."""
    return Settings(
        data_dir=data_dir,
        log=LogSettings(
            segment_bytes=4096, index_interval_bytes=256, retention_ms=-1, checkpoint_interval_ms=50
        ),
        redis=RedisSettings(key_prefix=key_prefix, lease_ttl_ms=2000, poll_fallback_ms=50),
        cluster=ClusterSettings(write_nodes=1, physical_partitions=1),
        rebalance=RebalanceSettings(window_ms=60_000),
    )


class SimulatedWriteNode:
    """A write node whose partition files live on ``disk`` (see the module docstring)."""

    def __init__(self, settings: Settings, redis_url: str, node_id: str = "w0", index: int = 0, *, seed: int = 0) -> None:
        self.settings = settings
        self.redis_url = redis_url
        self.node_id = node_id
        self.index = index
        root = settings.data_dir.resolve() / PARTITIONS_SUBDIR
        root.mkdir(parents=True, exist_ok=True)  # the mount point (its lock files are real)
        self.disk = SimDisk(root, seed=seed)
        self.service: WriteNodeService | None = None

    @property
    def address(self) -> str:
        assert self.service is not None
        return self.service.address

    async def boot(self) -> None:
        """Power on and start a write node on what the disk kept; returns once every
        partition it holds is online (its log recovered)."""
        self.disk.power_on()
        service = WriteNodeService(
            self.settings, self.node_id, self.index, self.redis_url, storage=self.disk, reopen_backoff_s=0.05
        )
        await service.start()
        self.service = service
        deadline = time.monotonic() + 30.0
        while not all(row.get("online") for row in service.ownership.snapshot()) or not service.ownership.held():
            if time.monotonic() > deadline:
                raise RuntimeError(f"write node {self.node_id}: partitions not online after boot")
            await asyncio.sleep(0.01)

    async def power_loss(self, mode: CrashMode = "strict") -> None:
        """Lose power (if an armed crash did not already) and drop the process: no clean
        close reaches the disk, the leases are left to this node id."""
        self.disk.power_loss(mode)
        service, self.service = self.service, None
        if service is not None:
            await service.stop(release=False)

    async def shutdown(self) -> None:
        service, self.service = self.service, None
        if service is not None:
            await service.stop(release=True)


@dataclass(slots=True)
class RoundResult:
    point: CrashPoint
    acked: int  # messages acknowledged in this round
    ops: int  # mutating disk calls of the round
    check: DeliveryCheck
    fired: bool  # the armed crash point was reached (else the power was cut after the timeout)


@dataclass(slots=True)
class CampaignResult:
    rounds: list[RoundResult] = field(default_factory=list)
    acked: int = 0
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        for r in self.rounds:
            kinds[r.point.kind] = kinds.get(r.point.kind, 0) + 1
        failed = [r for r in self.rounds if not r.check.ok]
        last = self.rounds[-1].check if self.rounds else None
        return {
            "crash_points": len(self.rounds),
            "acked": self.acked,
            "lost": max((r.check.lost for r in self.rounds), default=0),
            "moved": max((r.check.moved for r in self.rounds), default=0),
            "reordered": max((r.check.reordered for r in self.rounds), default=0),
            "duplicated": max((r.check.duplicated for r in self.rounds), default=0),
            "failed_rounds": len(failed),
            "in_log": last.found if last else 0,
            "crash_kinds": kinds,
            "lazy": sum(1 for r in self.rounds if r.point.mode == "lazy"),
            "not_fired": sum(1 for r in self.rounds if not r.fired),
            "seconds": round(self.seconds, 2),
        }


class PowerLossCampaign:
    """Rounds of produce, power loss, reboot, check (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        redis_url: str,
        *,
        key_prefix: str = "vpq-powerloss",
        producers: int = 8,
        max_batch: int = 4,
        seed: int = 0,
        round_timeout_s: float = 5.0,
    ) -> None:
        self.settings = campaign_settings(data_dir, key_prefix)
        self.redis_url = redis_url
        self.producers = producers
        self.max_batch = max_batch
        self.rng = random.Random(seed)
        self.round_timeout_s = round_timeout_s
        self.node = SimulatedWriteNode(self.settings, redis_url, seed=seed)
        self.acked: dict[tuple[int, int], int] = {}
        self._next_seq = [0] * producers
        self._queue_id = 0
        self._epoch = 0

    async def run(self, crash_points: int, on_round: Callable[[RoundResult], None] | None = None) -> CampaignResult:
        result = CampaignResult()
        started = time.monotonic()
        await self._place_queue()
        async with aiohttp.ClientSession() as http:
            client = WriteNodeClient(http, append_timeout_s=10.0, read_margin_s=5.0)
            await self.node.boot()
            try:
                for _ in range(crash_points):
                    rnd = await self._round(client, plan_crash(self.rng))
                    result.rounds.append(rnd)
                    result.acked = len(self.acked)
                    if on_round is not None:
                        on_round(rnd)
            finally:
                await self.node.shutdown()
        result.seconds = time.monotonic() - started
        return result

    async def _place_queue(self) -> None:
        md = MetadataStore(self.settings.redis, url=self.redis_url, queue_defaults=self.settings.queues)
        await md.start()
        try:
            rec, _ = await md.queues.create_or_update(QUEUE, {"virtual_partitions": 1})

            def place(m: dict[str, Any]) -> dict[str, Any]:
                m["queues"][QUEUE] = {"virtual_partitions": 1, "placement": [PARTITION]}
                return m

            await md.maps.update(place)
            self._queue_id, self._epoch = rec.id, await md.maps.epoch()
        finally:
            await md.stop()

    async def _round(self, client: WriteNodeClient, point: CrashPoint) -> RoundResult:
        disk = self.node.disk
        ops_before = disk.ops
        acked_before = len(self.acked)
        trigger = trigger_for(point)
        timer: asyncio.TimerHandle | None = None
        if trigger is not None:
            disk.arm(trigger, point.mode)
        else:
            timer = asyncio.get_running_loop().call_later(point.delay_s, disk.power_loss, point.mode)
        address = self.node.address
        producers = [asyncio.create_task(self._produce(client, address, p)) for p in range(self.producers)]
        deadline = time.monotonic() + self.round_timeout_s
        while not disk.down and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        fired = disk.down
        disk.arm(None)
        if timer is not None:
            timer.cancel()
        await self.node.power_loss(point.mode)  # no-op on the disk when the crash already fired
        for task in producers:
            task.cancel()
        await asyncio.gather(*producers, return_exceptions=True)
        ops = disk.ops - ops_before
        await self.node.boot()
        check = check_delivery(self.acked, await self._read_back(client))
        return RoundResult(point, len(self.acked) - acked_before, ops, check, fired)

    async def _produce(self, client: WriteNodeClient, address: str, producer: int) -> None:
        """Send batches of this producer's next messages, one request at a time, until
        the power fails; record every acknowledged offset."""
        disk = self.node.disk
        rng = random.Random(self.rng.random())
        while not disk.down:
            first = self._next_seq[producer]
            count = rng.randint(1, self.max_batch)
            self._next_seq[producer] = first + count
            records = [
                Record(
                    value=message_value(producer, seq),
                    queue_id=self._queue_id,
                    virtual_partition=0,
                    key_hash=producer,
                    key=f"k{producer}".encode(),
                )
                for seq in range(first, first + count)
            ]
            ts = int(time.time() * 1000)
            frame = Frame(PARTITION, build_columnar_batch(0, ts, columns_of(records, ts)))
            try:
                (answer,) = await client.append_many(address, [frame], self._epoch)
            except VpqError:
                answer = None
            if not isinstance(answer, tuple):  # the request or this frame was refused
                await asyncio.sleep(0.005)
                continue
            base = answer[0]
            for i in range(count):
                self.acked[(producer, first + i)] = base + i

    async def _read_back(self, client: WriteNodeClient) -> list[tuple[int, bytes]]:
        """Every (offset, value) of the partition, from its start, over HTTP."""
        out: list[tuple[int, bytes]] = []
        cursor = 0
        while True:
            got = await client.read(self.node.address, PARTITION, cursor, 1 << 20, 0)
            if cursor >= got.end_offset or not got.data:
                return out
            fresh = [(r.offset, r.value) for r in decode_batches(got.data, verify=True) if r.offset >= cursor]
            if not fresh:
                return out
            out.extend(fresh)
            cursor = fresh[-1][0] + 1


async def run_campaign(
    data_dir: Path, redis_url: str, crash_points: int, *, seed: int = 0, producers: int = 8, key_prefix: str = "vpq-powerloss",
    on_round: Callable[[RoundResult], None] | None = None,
) -> CampaignResult:
    """One campaign of ``crash_points`` rounds (see :class:`PowerLossCampaign`)."""
    campaign = PowerLossCampaign(data_dir, redis_url, key_prefix=key_prefix, producers=producers, seed=seed)
    return await campaign.run(crash_points, on_round)
