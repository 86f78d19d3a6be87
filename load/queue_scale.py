"""Control-plane scale: create queues up to N on a running platform and measure each step.

``run_queue_scale(url, redis_url, root_pid, ...)`` creates queues ``bq-0000000`` ...
in steps of ``step`` (``concurrency`` PUTs in flight, ``vps`` virtual partitions each)
and, after each step:

- ``create_ms_per_queue``: the step's wall time per queue;
- first produce: ``probes`` more queues, each created and then at once sent one message
  (the produce call's latency is timed; the queues count towards the total), so every
  layer meets a queue it has never seen (gateway, write node);
- ``create_cpu_ms_per_queue``: CPU time of the platform's processes (the three roles and
  redis-server) over the step per queue, which a busy shared machine inflates far less
  than wall time (``load1``, the load average at the step's end, says how busy it was);
- at the end, one ``GET /v1/maps/current`` (the whole map, every queue), timed;
- RSS of each platform process by role (``gateway``, ``write``, ``read``; from the
  ``vpq up`` process tree, ``load.procmem``) and the metadata store's ``used_memory``.

``summary(steps, base)`` reduces the steps to the figures the issue asks for: the create
time of the last 10 % of queues over the first 10 % (``create_ratio``; the same of CPU
time, ``create_cpu_ratio``), the p99 of every
first produce, KB per queue of each process (RSS growth over the queues created) and
bytes per queue in Redis. Pure apart from the HTTP calls and the process/Redis reads.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Callable
from typing import Any

import psutil

from vpq.metadata.connection import create_client
from vpq.sdk.client import AsyncClient

ROLES = {
    "vpq.gateway.main": "gateway", "vpq.write_nodes.main": "write", "vpq.read_nodes.main": "read", "redis-server": "redis",
}


def role_pids(root_pid: int) -> dict[str, int]:
    """The first process of each role under ``root_pid`` (by its ``-m`` module)."""
    out: dict[str, int] = {}
    try:
        children = psutil.Process(root_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return out
    for child in children:
        try:
            cmd = " ".join(child.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        for module, role in ROLES.items():
            if module in cmd and role not in out:
                out[role] = child.pid
    return out


def cpu_seconds(pids: dict[str, int]) -> float:
    """User + system CPU seconds of the platform's processes so far."""
    total = 0.0
    for pid in pids.values():
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            continue
    return total


def rss_by_role(pids: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for role, pid in pids.items():
        if role == "redis":
            continue  # its memory is Redis's own used_memory
        try:
            out[role] = psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            out[role] = 0
    return out


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100.0 * len(s)) - 1))]


async def _create(client: AsyncClient, names: list[str], concurrency: int, vps: int) -> None:
    it = iter(names)

    async def worker() -> None:
        for name in it:
            await client.put_queue(name, virtual_partitions=vps)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _probe(client: AsyncClient, name: str, vps: int) -> float:
    await client.put_queue(name, virtual_partitions=vps)
    t0 = time.perf_counter()
    await client.produce(name, [{"key": "k", "value": {"probe": name}}])
    return (time.perf_counter() - t0) * 1000.0


async def run_queue_scale(
    url: str, redis_url: str, root_pid: int, *, total: int, step: int, concurrency: int, vps: int, probes: int,
    on_step: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """See the module docstring; ``on_step`` sees each step's figures as they come."""
    pids = role_pids(root_pid)
    redis = create_client(redis_url)  # any URL the platform takes, redis+sentinel:// too
    steps: list[dict[str, Any]] = []
    try:
        base = {"rss": rss_by_role(pids), "redis_used": int((await redis.info("memory"))["used_memory"])}
        created = 0
        async with AsyncClient(url, timeout=60.0) as client:
            while created < total:
                left = total - created
                k = min(probes, left - 1) if left > 1 else 0  # the step's probe queues
                n = min(step, left) - k
                names = [f"bq-{i:07d}" for i in range(created, created + n)]
                t0, cpu0 = time.perf_counter(), cpu_seconds(pids)
                await _create(client, names, concurrency, vps)
                secs, cpu = time.perf_counter() - t0, cpu_seconds(pids) - cpu0
                created += n
                lat = [await _probe(client, f"bq-{created + i:07d}", vps) for i in range(k)]
                created += len(lat)
                mem = await redis.info("memory")
                s = {
                    "queues": created,
                    "create_ms_per_queue": round(secs * 1000.0 / n, 3),
                    "create_cpu_ms_per_queue": round(cpu * 1000.0 / n, 3),
                    "load1": round(os.getloadavg()[0], 2),
                    "first_produce_ms": [round(x, 2) for x in lat],
                    "first_produce_p99_ms": round(percentile(lat, 99), 2),
                    "rss": rss_by_role(pids),
                    "redis_used": int(mem["used_memory"]),
                }
                steps.append(s)
                if on_step is not None:
                    on_step(s)
            t0 = time.perf_counter()
            whole = await client.current_map()
            map_read = {"seconds": round(time.perf_counter() - t0, 3), "queues": len(whole["queues"])}
    finally:
        await redis.aclose()
    return {"base": base, "steps": steps, "summary": {**summary(steps, base), "map_read": map_read}}


def summary(steps: list[dict[str, Any]], base: dict[str, Any]) -> dict[str, Any]:
    """The headline figures of a run (see the module docstring)."""
    if not steps:
        return {}
    total = steps[-1]["queues"]
    tenth = max(1, math.ceil(len(steps) / 10))
    first = sum(s["create_ms_per_queue"] for s in steps[:tenth]) / tenth
    last = sum(s["create_ms_per_queue"] for s in steps[-tenth:]) / tenth
    cpu_first = sum(s.get("create_cpu_ms_per_queue", 0.0) for s in steps[:tenth]) / tenth
    cpu_last = sum(s.get("create_cpu_ms_per_queue", 0.0) for s in steps[-tenth:]) / tenth
    lat = [x for s in steps for x in s["first_produce_ms"]]
    kb = {
        role: round((steps[-1]["rss"].get(role, 0) - rss) / 1024.0 / total, 3) for role, rss in base["rss"].items()
    }
    return {
        "queues": total,
        "create_ms_per_queue_first_10pct": round(first, 3),
        "create_ms_per_queue_last_10pct": round(last, 3),
        "create_ratio": round(last / first, 3) if first else None,
        "create_cpu_ms_per_queue_first_10pct": round(cpu_first, 3),
        "create_cpu_ms_per_queue_last_10pct": round(cpu_last, 3),
        "create_cpu_ratio": round(cpu_last / cpu_first, 3) if cpu_first else None,
        "load1_min_max": [min(s.get("load1", 0.0) for s in steps), max(s.get("load1", 0.0) for s in steps)],
        "first_produce_p50_ms": round(percentile(lat, 50), 2),
        "first_produce_p99_ms": round(percentile(lat, 99), 2),
        "first_produce_samples": len(lat),
        "kb_per_queue": kb,
        "redis_bytes_per_queue": round((steps[-1]["redis_used"] - base["redis_used"]) / total, 1),
        "redis_used_mb": round(steps[-1]["redis_used"] / 2**20, 1),
    }
