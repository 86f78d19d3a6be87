"""Fault campaign of a replicated platform: real processes, real faults, a checking consumer.

:func:`run_fault_campaign` starts a :class:`~load.replicated_platform.ReplicatedPlatform`
(2 write nodes, replication factor 2 by default), runs a :class:`KeyedProducer` for the
whole campaign, injects ``cycles`` faults of each kind in ``faults`` (waiting after each
until a killed node is back, every partition is led, online and fully in sync again,
and a new message was acknowledged), then consumes the queue
with a fresh group and checks (:func:`check_delivery`):

- every acknowledged message is delivered (none lost);
- per key, messages arrive in the order they were acknowledged (first deliveries);
- duplicates are counted (at-least-once allows those of retried requests).

Faults (``FAULTS``), each on the leader or a follower of partition ``pp``:

- ``kill_leader``: SIGKILL of the leader (``vpq up`` restarts it);
- ``zombie``: SIGSTOP of the leader for 2.5 lease TTLs, then SIGCONT;
- ``redis_cut``: the leader cut off from Redis for 2.5 lease TTLs (the platform reaches
  Redis through a ``load.tcp_proxy.CuttingProxy`` that closes the leader's connections
  and refuses its new ones), while it keeps running and reaching its followers;
- ``wipe_follower``: SIGKILL of a follower and removal of its whole data directory
  before it restarts;
- ``power_loss``: SIGKILL of every vpq process (Redis keeps running), then each replica's segment cut at a random
  point past the acknowledged end (its unsynced tail, torn writes included), restart;
- ``bitflip``: SIGKILL of a follower, one random bit of its segment flipped, restart.

The producer: ``producers`` workers each own ``keys`` keys; a request carries one
message per key with the next sequence number, and is retried unchanged until it is
answered 200 (then the worker pauses ``pause_s``), so per key the acknowledged order is
the send order.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from vpq.common.redis_server import RedisServer
from vpq.load.replicated_platform import ReplicatedPlatform, cut_unsynced_tail, flip_bit
from vpq.load.tcp_proxy import CuttingProxy

FAULTS = ("kill_leader", "zombie", "redis_cut", "wipe_follower", "power_loss", "bitflip")
QUEUE = "faults"


@dataclass
class FaultConfig:
    faults: tuple[str, ...] = FAULTS
    cycles: int = 20
    producers: int = 4
    keys: int = 4
    pp: int = 0
    physical_partitions: int = 2
    write_nodes: int = 2
    replication_factor: int = 2
    min_insync: int = 1
    lease_ttl_ms: int = 1500
    settle_s: float = 0.5
    pause_s: float = 0.05  # each producer's pause after an acknowledged request
    seed: int = 0


@dataclass
class KeyedProducer:
    """Per-key ordered producer with retries (see module doc)."""

    url: str
    queue: str
    producers: int
    keys: int
    pause_s: float = 0.0
    acked: dict[str, list[int]] = field(default_factory=dict)
    acked_end: dict[int, int] = field(default_factory=dict)
    where: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    requests: int = 0
    failures: int = 0

    @property
    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    async def wait_progress(self, before: int, timeout_s: float) -> None:
        """Until more than ``before`` messages are acknowledged."""
        deadline = time.monotonic() + timeout_s
        while self.acked_count <= before:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no acknowledgement for {timeout_s:.0f}s")
            await asyncio.sleep(0.05)

    async def run(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        await asyncio.gather(*(self._worker(session, w, stop) for w in range(self.producers)))

    async def _worker(self, session: aiohttp.ClientSession, w: int, stop: asyncio.Event) -> None:
        keys = [f"p{w}-k{i}" for i in range(self.keys)]
        seq = 0
        while not stop.is_set():
            seq += 1
            body = {"messages": [{"key": k, "value": {"k": k, "s": seq}} for k in keys]}
            while not stop.is_set():
                self.requests += 1
                try:
                    async with session.post(
                        f"{self.url}/v1/queues/{self.queue}/messages", json=body,
                        timeout=aiohttp.ClientTimeout(total=15),
                    ) as resp:
                        if resp.status == 200:
                            for r, m in zip((await resp.json())["results"], body["messages"], strict=True):
                                self.acked.setdefault(m["key"], []).append(seq)
                                pp, off = int(r["partition"]), int(r["offset"])
                                self.where[(m["key"], seq)] = (pp, off)
                                self.acked_end[pp] = max(self.acked_end.get(pp, 0), off + 1)
                            await asyncio.sleep(self.pause_s)
                            break
                        await resp.read()
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    pass
                self.failures += 1
                await asyncio.sleep(0.05)


async def consume_all(session: aiohttp.ClientSession, url: str, queue: str, expected: int, idle_s: float = 20.0) -> list[dict[str, Any]]:
    """Every message of ``queue`` through a fresh group, in delivery order, until
    ``expected`` distinct ones were seen and nothing more came for 2 s, or nothing came
    for ``idle_s``."""
    group = f"check-{uuid.uuid4().hex[:6]}"
    base = f"{url}/v1/queues/{queue}/groups/{group}/consumers"
    cid = None
    deadline = time.monotonic() + 60
    while cid is None:
        async with session.post(base, json={}) as resp:
            if resp.status == 200:
                cid = (await resp.json())["consumer_id"]
            elif time.monotonic() > deadline:
                raise RuntimeError(f"cannot join: {resp.status} {await resp.text()}")
            else:
                await asyncio.sleep(0.5)
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    last_new = time.monotonic()
    while True:
        idle = time.monotonic() - last_new
        if (len(seen) >= expected and idle > 2.0) or idle > idle_s:
            return out
        try:
            async with session.post(f"{base}/{cid}/poll", json={"max_messages": 1000, "wait_ms": 500}) as resp:
                if resp.status != 200:
                    await asyncio.sleep(0.3)
                    continue
                batch = (await resp.json())["messages"]
        except (aiohttp.ClientError, asyncio.TimeoutError):
            await asyncio.sleep(0.3)
            continue
        if batch:
            out.extend(batch)
            for m in batch:
                if m["id"] not in seen:
                    seen.add(m["id"])
                    last_new = time.monotonic()
            async with session.post(f"{base}/{cid}/ack", json={"ids": [m["id"] for m in batch]}) as resp:
                await resp.read()


def check_delivery(acked: dict[str, list[int]], delivered: list[dict[str, Any]]) -> dict[str, int]:
    """lost / reordered / duplicates of ``delivered`` against the acknowledged sequence
    numbers per key (see module doc)."""
    firsts: dict[str, list[int]] = {}
    seen: set[tuple[str, int]] = set()
    duplicates = 0
    for m in delivered:
        v = m["value"]
        pair = (v["k"], int(v["s"]))
        if pair in seen:
            duplicates += 1
            continue
        seen.add(pair)
        firsts.setdefault(pair[0], []).append(pair[1])
    lost = sum(1 for k, seqs in acked.items() for s in seqs if (k, s) not in seen)
    reordered = sum(1 for seqs in firsts.values() for a, b in zip(seqs, seqs[1:]) if b < a)
    return {"acked": sum(len(v) for v in acked.values()), "delivered": len(delivered), "lost": lost,
            "reordered": reordered, "duplicates": duplicates}


async def inject(
    fault: str, plat: ReplicatedPlatform, session: aiohttp.ClientSession, cfg: FaultConfig,
    producer: KeyedProducer, rng: random.Random, proxy: CuttingProxy | None = None,
) -> tuple[str, list[tuple[str, int]]]:
    """One fault on partition ``cfg.pp``: a line saying what was done, and the (node id,
    pid) of each write node killed (``vpq up`` restarts them)."""
    pp = cfg.pp
    if fault == "kill_leader":
        leader = await plat.leader_of(session, pp)
        pid = plat.signal(leader, signal.SIGKILL)
        return f"SIGKILL leader {leader}", [(leader, pid)]
    if fault == "zombie":
        leader = await plat.leader_of(session, pp)
        plat.signal(leader, signal.SIGSTOP)
        await asyncio.sleep(2.5 * cfg.lease_ttl_ms / 1000.0)
        plat.signal(leader, signal.SIGCONT)
        return f"SIGSTOP leader {leader} for {2.5 * cfg.lease_ttl_ms / 1000.0:.1f}s, SIGCONT", []
    if fault == "redis_cut":
        leader = await plat.leader_of(session, pp)
        pid = plat.pid_of(leader)
        assert proxy is not None and pid is not None
        cut = proxy.block(pid)
        await asyncio.sleep(2.5 * cfg.lease_ttl_ms / 1000.0)
        proxy.unblock(pid)
        return f"leader {leader} cut off from Redis ({cut} connections) for {2.5 * cfg.lease_ttl_ms / 1000.0:.1f}s", []
    if fault in ("wipe_follower", "bitflip"):
        follower = await plat.follower_of(session, pp)
        pid = plat.signal(follower, signal.SIGKILL)
        if fault == "wipe_follower":
            plat.wipe(follower)
            return f"SIGKILL follower {follower}, data directory removed", [(follower, pid)]
        files = plat.partition_files(follower, pp)
        where = flip_bit(files[-1], rng) if files else None
        name = files[-1].name if files else "-"
        return f"SIGKILL follower {follower}, bit flipped at byte {where} of {name}", [(follower, pid)]
    if fault == "power_loss":
        plat.kill_all()
        await asyncio.sleep(1.0)  # answers sent before the kill may still be in the socket buffers: count them
        cut = 0
        for i in range(cfg.write_nodes):
            for p in range(cfg.physical_partitions):
                files = plat.partition_files(f"w{i}", p)
                if files:
                    cut += cut_unsynced_tail(files[-1], producer.acked_end.get(p, 0), rng)
        await plat.restart()
        return f"SIGKILL of every process, {cut} unacknowledged bytes cut, restarted", []
    raise ValueError(f"unknown fault {fault!r}")


async def run_fault_campaign(cfg: FaultConfig, work: Path, echo: Callable[[str], None]) -> dict[str, Any]:
    rng = random.Random(cfg.seed)
    redis = RedisServer(data_dir=work / "redis-server", appendonly=True)
    redis.start()
    proxy = CuttingProxy("127.0.0.1", redis.port)
    await proxy.start()
    plat = ReplicatedPlatform(
        work / "vpq", write_nodes=cfg.write_nodes, replication_factor=cfg.replication_factor,
        min_insync=cfg.min_insync, physical_partitions=cfg.physical_partitions, lease_ttl_ms=cfg.lease_ttl_ms,
        redis_url=f"redis://127.0.0.1:{proxy.port}/0",
    )
    results: dict[str, Any] = {"faults": {}}
    try:
        await plat.start()
        async with aiohttp.ClientSession() as session:
            async with session.put(f"{plat.url}/v1/queues/{QUEUE}", json={}) as resp:
                assert resp.status in (200, 201), await resp.text()
            await plat.wait_healthy(session)
            producer = KeyedProducer(plat.url, QUEUE, cfg.producers, cfg.keys, cfg.pause_s)
            stop = asyncio.Event()
            task = asyncio.create_task(producer.run(session, stop))
            try:
                for fault in cfg.faults:
                    heal: list[float] = []
                    for cycle in range(cfg.cycles):
                        await asyncio.sleep(cfg.settle_s)
                        before = producer.acked_count
                        started = time.monotonic()
                        what, killed = await inject(fault, plat, session, cfg, producer, rng, proxy)
                        for node, pid in killed:
                            await plat.wait_restarted(node, pid)
                        await plat.wait_healthy(session)
                        await producer.wait_progress(before, 60.0)
                        heal.append(time.monotonic() - started)
                        after = producer.acked_count
                        echo(f"{fault} {cycle + 1}/{cfg.cycles}: {what}; healthy and acking after {heal[-1]:.1f}s; "
                             f"acked {after} (+{after - before})")
                    results["faults"][fault] = {"cycles": cfg.cycles, "heal_max_s": round(max(heal), 2)}
                await asyncio.sleep(1.0)
            finally:
                stop.set()
                await task
            delivered = await consume_all(session, plat.url, QUEUE, sum(len(v) for v in producer.acked.values()))
            results.update(check_delivery(producer.acked, delivered))
            if results["lost"]:
                got = {(m["value"]["k"], int(m["value"]["s"])) for m in delivered}
                missing = sorted(producer.where[(k, s)] for k, seqs in producer.acked.items() for s in seqs
                                 if (k, s) not in got and (k, s) in producer.where)
                results["lost_at"] = missing[:20]
            results["requests"] = producer.requests
            results["failed_requests"] = producer.failures
    finally:
        plat.stop()
        await proxy.stop()
        redis.stop()
    return results
