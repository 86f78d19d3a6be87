"""Figures of replication: produce cost of R = 2 against R = 1, and failover time.

:func:`run_throughput` starts two platforms side by side (2 write nodes each; one with
replication factor 1, one with 2 and ``min_insync`` 2) and runs ``rounds`` alternating
produce rounds on them (R = 1, R = 2, R = 1, ...): ``concurrency`` closed-loop
producers, each sending requests of ``batch`` messages of ``value_bytes`` for
``seconds``. Each round gives messages/s and request p50/p99; the answer has the
median of each over the rounds of each platform, and the ratios R2/R1.

:func:`run_failover` runs one R = 2 platform (``min_insync`` 1, lease
``lease_ttl_ms``) under ``concurrency`` producers of single messages with random keys
and SIGKILLs the leader of pp 0 ``kills`` times (``vpq up`` restarts it; the platform
is healthy again before the next kill). Each kill's figure is the time from the kill
to the first acknowledgement on pp 0 of a request sent after it: the time without
produce on that partition.
"""

from __future__ import annotations

import asyncio
import random
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from vpq.load.replicated_platform import ReplicatedPlatform

QUEUE = "repbench"


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def produce_round(
    session: aiohttp.ClientSession, url: str, seconds: float, concurrency: int, batch: int, value_bytes: int
) -> dict[str, float]:
    latencies: list[float] = []
    errors = [0]
    messages = [0]
    deadline = time.monotonic() + seconds
    payload = "x" * value_bytes

    async def worker(w: int) -> None:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            body = {"messages": [{"key": f"w{w}-{(n * batch + i) % 64}", "value": payload} for i in range(batch)]}
            t = time.perf_counter()
            try:
                async with session.post(f"{url}/v1/queues/{QUEUE}/messages", json=body) as resp:
                    await resp.read()
                    ok = resp.status == 200
            except (aiohttp.ClientError, asyncio.TimeoutError):
                ok = False
            if ok:
                latencies.append((time.perf_counter() - t) * 1000.0)
                messages[0] += batch
            else:
                errors[0] += 1

    started = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.monotonic() - started
    return {
        "messages_per_s": round(messages[0] / elapsed, 1),
        "request_p50_ms": round(_pct(latencies, 0.50), 2),
        "request_p99_ms": round(_pct(latencies, 0.99), 2),
        "errors": errors[0],
    }


async def _prepare(plat: ReplicatedPlatform, session: aiohttp.ClientSession) -> None:
    await plat.start()
    async with session.put(f"{plat.url}/v1/queues/{QUEUE}", json={}) as resp:
        assert resp.status in (200, 201), await resp.text()
    if plat.replication_factor > 1:
        await plat.wait_healthy(session)


async def run_throughput(
    work: Path, echo: Callable[[str], None], *, rounds: int = 6, seconds: float = 5.0, concurrency: int = 8,
    batch: int = 100, value_bytes: int = 100, physical_partitions: int = 4,
) -> dict[str, Any]:
    plats = {
        1: ReplicatedPlatform(work / "r1", replication_factor=1, min_insync=1, physical_partitions=physical_partitions,
                              lease_ttl_ms=10000, replica_lag_max_ms=3000),
        2: ReplicatedPlatform(work / "r2", replication_factor=2, min_insync=2, physical_partitions=physical_partitions,
                              lease_ttl_ms=10000, replica_lag_max_ms=3000),
    }
    per: dict[int, list[dict[str, float]]] = {1: [], 2: []}
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=256)) as session:
        try:
            for plat in plats.values():
                await _prepare(plat, session)
            for r in range(rounds):
                for factor, plat in plats.items():
                    got = await produce_round(session, plat.url, seconds, concurrency, batch, value_bytes)
                    per[factor].append(got)
                    echo(f"round {r + 1}/{rounds} R={factor}: {got['messages_per_s']:.0f} msg/s, "
                         f"p50 {got['request_p50_ms']} ms, p99 {got['request_p99_ms']} ms, errors {got['errors']}")
        finally:
            for plat in plats.values():
                plat.stop()

    def med(factor: int, key: str) -> float:
        return round(statistics.median(x[key] for x in per[factor]), 2)

    out: dict[str, Any] = {"batch": batch, "concurrency": concurrency, "seconds_per_round": seconds, "rounds": rounds}
    for factor in (1, 2):
        out[f"r{factor}"] = {k: med(factor, k) for k in ("messages_per_s", "request_p50_ms", "request_p99_ms")}
        out[f"r{factor}"]["errors"] = sum(x["errors"] for x in per[factor])
    out["throughput_ratio_r2_r1"] = round(out["r2"]["messages_per_s"] / max(out["r1"]["messages_per_s"], 1e-9), 3)
    out["p99_ratio_r2_r1"] = round(out["r2"]["request_p99_ms"] / max(out["r1"]["request_p99_ms"], 1e-9), 3)
    return out


async def run_failover(
    work: Path, echo: Callable[[str], None], *, kills: int = 20, concurrency: int = 8, lease_ttl_ms: int = 2000,
    physical_partitions: int = 2, pp: int = 0,
) -> dict[str, Any]:
    plat = ReplicatedPlatform(work / "failover", replication_factor=2, min_insync=1,
                              physical_partitions=physical_partitions, lease_ttl_ms=lease_ttl_ms)
    gaps: list[float] = []
    acks: list[tuple[float, float]] = []  # (sent at, answered at) of each ack on pp
    stop = asyncio.Event()
    rng = random.Random(1)

    async def worker(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            sent = time.monotonic()
            body = {"messages": [{"key": f"k{rng.randrange(1 << 20)}", "value": 1}]}
            try:
                async with session.post(f"{plat.url}/v1/queues/{QUEUE}/messages", json=body) as resp:
                    if resp.status == 200:
                        r = (await resp.json())["results"][0]
                        if r["partition"] == pp:
                            acks.append((sent, time.monotonic()))
                        continue
                    await resp.read()
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            await asyncio.sleep(0.01)

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        try:
            await _prepare(plat, session)
            tasks = [asyncio.create_task(worker(session)) for _ in range(concurrency)]
            try:
                for k in range(kills):
                    await plat.wait_healthy(session)
                    await asyncio.sleep(1.0)
                    leader = await plat.leader_of(session, pp)
                    killed_at = time.monotonic()
                    pid = plat.signal(leader, signal.SIGKILL)
                    while not any(sent >= killed_at for sent, _ in acks):
                        if time.monotonic() - killed_at > 120:
                            raise TimeoutError("no produce on the partition 120 s after the kill")
                        await asyncio.sleep(0.01)
                    first = min(done for sent, done in acks if sent >= killed_at)
                    gaps.append(first - killed_at)
                    echo(f"kill {k + 1}/{kills}: SIGKILL leader {leader}; produce on pp {pp} again after "
                         f"{gaps[-1]:.2f}s")
                    await plat.wait_restarted(leader, pid)
            finally:
                stop.set()
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            plat.stop()
    return {
        "kills": kills,
        "lease_ttl_ms": lease_ttl_ms,
        "no_produce_p50_s": round(_pct(gaps, 0.5), 2),
        "no_produce_p99_s": round(_pct(gaps, 0.99), 2),
        "no_produce_max_s": round(max(gaps), 2),
        "gaps_s": [round(g, 2) for g in gaps],
    }
