"""``vpq bench delayed``: delayed delivery lateness, and read-node memory per pending
delayed message.

1. **Lateness.** A fresh queue, ONE consumer (join, then polls of ``max_messages``
   with ``wait_ms`` 1000, the next poll sent as soon as one is answered, each poll's
   messages acked in the background, as the SDK's consumer does). Open loop: every
   ``1 / requests_per_s`` seconds a produce request of ``rate / requests_per_s``
   messages, each with ``deliver_at_ms`` = its send time + a delay drawn from
   ``delay_ms`` (min, max), over ``keys`` keys, for ``seconds``. A message's
   *lateness* = the wall time its poll answer arrived - its ``deliver_at_ms``
   (negative: it came early, counted in ``early``, a failure). Figures: p50/p99/max
   lateness (the goal is p99 under 100 ms), messages ``lost`` (produced, never
   delivered within ``settle_s`` after the last due time), duplicates.
2. **Memory.** A second queue and group with one member that polls throughout (the
   records of a context no live member takes are not read at all; anything it
   receives after the warm-up came early and counts in ``early``). A warm-up of ``warmup`` immediate messages of the same size is produced and
   consumed, so the read node's record cache is as full before as after; the read
   node's RSS is then sampled (``rss_before``, psutil, the read-node processes of the
   platform), ``pending`` messages are produced with ``delay_ms`` = ``pending_delay_ms``
   (none comes due during the run), the run waits until the group's
   ``vpq_group_delayed_messages`` gauge reaches ``pending`` and samples again
   (``rss_after``). Figures: both, their difference (the goal is under 150 MB for
   1,000,000) and bytes per pending message; the record cache's bytes at both points
   (from ``/metrics``) show how much of the difference is not the cache.

RSS figures are ``None`` when the platform's processes are not visible from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from vpq.load.platform_bench.target import scratch_queue
from vpq.load.stats import summarize_ms
from vpq.sdk.client import AsyncClient
from vpq.sdk.errors import VpqClientError

Echo = Callable[[str], None]
RssSampler = Callable[[], "int | None"]
GROUP = "bench-delayed"
MB = 1_000_000


@dataclass(frozen=True)
class DelayedConfig:
    rate: float = 1000.0
    requests_per_s: float = 50.0
    seconds: float = 20.0
    delay_min_ms: int = 1000
    delay_max_ms: int = 5000
    keys: int = 200
    value_bytes: int = 100
    max_messages: int = 100
    settle_s: float = 10.0
    pending: int = 1_000_000
    pending_delay_ms: int = 3_600_000
    warmup: int = 300_000
    produce_batch: int = 1000
    produce_workers: int = 4
    fill_timeout_s: float = 300.0
    virtual_partitions: int = 16

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.requests_per_s <= 0 or self.seconds <= 0 or self.settle_s < 0:
            raise ValueError("rate, requests_per_s and seconds must be > 0, settle_s >= 0")
        if not 0 < self.delay_min_ms <= self.delay_max_ms <= 604_800_000:
            raise ValueError("need 0 < delay_min_ms <= delay_max_ms <= 7 days")
        if min(self.keys, self.produce_batch, self.produce_workers) < 1 or self.pending < 0 or self.warmup < 0:
            raise ValueError("keys, produce_batch and produce_workers must be >= 1; pending, warmup >= 0")
        if not 1 <= self.max_messages <= 1000 or self.value_bytes < 16:
            raise ValueError("max_messages within 1..1000, value_bytes >= 16")

    @classmethod
    def quick(cls) -> DelayedConfig:
        """A form that runs in seconds (tests, smoke checks)."""
        return cls(rate=200.0, seconds=3.0, delay_min_ms=300, delay_max_ms=1000, settle_s=5.0, pending=20_000,
                   warmup=5_000)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


async def _lateness(client: AsyncClient, cfg: DelayedConfig, echo: Echo) -> dict[str, Any]:
    rng = random.Random(1)
    pad = "x" * cfg.value_bytes
    async with scratch_queue(client, "bench-delayed", virtual_partitions=cfg.virtual_partitions) as info:
        q = info["name"]
        cid = (await client.join(q, GROUP)).consumer_id
        due_of: dict[int, int] = {}
        received: dict[int, int] = {}
        late: list[float] = []
        dup = early = 0
        stop = asyncio.Event()

        async def consume() -> None:
            nonlocal dup, early
            while not stop.is_set():
                batch = await client.poll(q, GROUP, cid, max_messages=cfg.max_messages, wait_ms=1000)
                now = _wall_ms()
                for m in batch:
                    i, due = m.value["i"], m.value["due"]
                    if i in received:
                        dup += 1
                        continue
                    received[i] = now
                    late.append((now - due) / 1000.0)
                    if now < due:
                        early += 1
                if batch:  # acked in the background, as the SDK's consumer does: the next poll goes out at once
                    acks.append(asyncio.create_task(client.ack(q, GROUP, cid, [m.id for m in batch])))

        acks: list[asyncio.Task[int]] = []
        consumer = asyncio.create_task(consume())
        per_request = max(1, round(cfg.rate / cfg.requests_per_s))
        requests = round(cfg.seconds * cfg.requests_per_s)
        start = time.monotonic()
        n = 0
        for r in range(requests):
            await asyncio.sleep(max(0.0, start + r / cfg.requests_per_s - time.monotonic()))
            now = _wall_ms()
            msgs = []
            for _ in range(per_request):
                due = now + rng.randint(cfg.delay_min_ms, cfg.delay_max_ms)
                due_of[n] = due
                msgs.append({"key": f"k{n % cfg.keys}", "value": {"i": n, "due": due, "pad": pad}, "deliver_at_ms": due})
                n += 1
            await client.produce(q, msgs)
        produce_s = time.monotonic() - start
        echo(f"lateness: produced {n:,} delayed messages in {produce_s:.1f} s; waiting for the last due times")
        last_due = max(due_of.values(), default=_wall_ms())
        deadline = time.monotonic() + max(0.0, (last_due - _wall_ms()) / 1000.0) + cfg.settle_s
        while len(received) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        stop.set()
        await consumer
        await asyncio.gather(*acks)
        summary = summarize_ms(late)
        return {
            "produced": n, "produce_per_s": round(n / produce_s, 1), "delivered": len(received),
            "lost": n - len(received), "duplicates": dup, "early": early,
            "lateness_p50_ms": summary.get("p50_ms"), "lateness_p99_ms": summary.get("p99_ms"),
            "lateness_max_ms": summary.get("max_ms"),
        }


def _gauge(text: str, name: str, queue: str | None = None) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (queue is None or f'queue="{queue}"' in line):
            total += float(line.rpartition(" ")[2])
    return total


async def _produce_many(client: AsyncClient, q: str, cfg: DelayedConfig, count: int, delay_ms: int) -> float:
    pad = "x" * cfg.value_bytes
    next_i = 0
    start = time.monotonic()

    async def worker() -> None:
        nonlocal next_i
        while next_i < count:
            lo = next_i
            next_i = hi = min(count, lo + cfg.produce_batch)
            msgs = [{"key": f"k{i % cfg.keys}", "value": {"i": i, "pad": pad}} for i in range(lo, hi)]
            if delay_ms:
                for m in msgs:
                    m["delay_ms"] = delay_ms
            await client.produce(q, msgs)

    await asyncio.gather(*(worker() for _ in range(cfg.produce_workers)))
    return count / max(time.monotonic() - start, 1e-9)


async def _memory(client: AsyncClient, cfg: DelayedConfig, echo: Echo, rss: RssSampler) -> dict[str, Any]:
    async with scratch_queue(client, "bench-delayed-rss", virtual_partitions=cfg.virtual_partitions) as info:
        q = info["name"]
        cid = (await client.join(q, GROUP)).consumer_id
        if cfg.warmup:
            await _produce_many(client, q, cfg, cfg.warmup, 0)
            seen = 0
            while seen < cfg.warmup:
                batch = await client.poll(q, GROUP, cid, max_messages=1000, wait_ms=1000)
                seen += len(batch)
                if batch:
                    await client.ack(q, GROUP, cid, [m.id for m in batch])
            echo(f"memory: warm-up of {cfg.warmup:,} immediate messages consumed")
        polled = 0

        async def keep_alive() -> None:  # the member polls on (a group without one reads nothing)
            nonlocal polled
            while True:
                batch = await client.poll(q, GROUP, cid, max_messages=1000, wait_ms=1000)
                polled += len(batch)

        poller = asyncio.create_task(keep_alive())
        try:
            out = await _fill(client, q, cfg, echo, rss)
            out["pending_delivered"] = polled  # before their due time: must stay 0
            return out
        finally:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError, VpqClientError):
                await poller


async def _fill(client: AsyncClient, q: str, cfg: DelayedConfig, echo: Echo, rss: RssSampler) -> dict[str, Any]:
    await asyncio.sleep(1.0)
    before = await asyncio.to_thread(rss)
    cache_before = _gauge(await client.metrics(), "vpq_record_cache_bytes")
    rate = await _produce_many(client, q, cfg, cfg.pending, cfg.pending_delay_ms)
    echo(f"memory: produced {cfg.pending:,} messages delayed by {cfg.pending_delay_ms:,} ms at {rate:,.0f} msg/s")
    deadline = time.monotonic() + cfg.fill_timeout_s
    delayed = 0.0
    while time.monotonic() < deadline:
        delayed = _gauge(await client.metrics(), "vpq_group_delayed_messages", q)
        if delayed >= cfg.pending:
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(2.0)  # a persist or two of the ack state, as in steady state
    after = await asyncio.to_thread(rss)
    metrics = await client.metrics()
    cache_after = _gauge(metrics, "vpq_record_cache_bytes")
    growth = None if before is None or after is None else after - before
    return {
        "pending": int(delayed), "pending_produce_per_s": round(rate, 1),
        "rss_before_mb": None if before is None else round(before / MB, 1),
        "rss_after_mb": None if after is None else round(after / MB, 1),
        "rss_growth_mb": None if growth is None else round(growth / MB, 1),
        "bytes_per_pending": None if growth is None or not delayed else round(growth / delayed, 1),
        "cache_before_mb": round(cache_before / MB, 1), "cache_after_mb": round(cache_after / MB, 1),
    }


async def run_delayed(client: AsyncClient, cfg: DelayedConfig, echo: Echo, rss: RssSampler) -> dict[str, Any]:
    """Both parts (see the module docstring); one dict of figures and counts."""
    out: dict[str, Any] = {"config": asdict(cfg)}
    out.update(await _lateness(client, cfg, echo))
    if cfg.pending:
        out.update(await _memory(client, cfg, echo, rss))
    out["early"] += out.get("pending_delivered", 0)
    out["timed_out"] = bool(cfg.pending) and out.get("pending", 0) < cfg.pending
    return out
