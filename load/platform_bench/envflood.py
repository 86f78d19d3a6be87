"""``vpq bench envflood``: a flood of an env nobody consumes, then prod traffic.

1. A fresh queue (``ordering: key``) and a group with ONE prod SDK consumer (joined
   with ``start: earliest`` before anything is produced; polls of ``max_messages``,
   acks after each poll).
2. The read nodes' RSS is sampled (``rss_before``), then every ``rss_every_s`` until
   the end (``rss_peak``).
3. The flood: ``flood`` messages of ``flood_bytes`` with ``X-Env: test`` over
   ``flood_keys`` keys, ``flood_workers`` senders of ``flood_batch`` messages a request.
   No member of the group may take them (env is never crossed).
4. Prod traffic, open loop: a request of ``prod_batch`` prod messages every
   ``prod_batch / prod_rate`` seconds for ``prod_seconds`` (keys ``prod-<n>``), each
   stamped with its scheduled send time; a message's latency runs from that time to
   its first delivery. The run waits up to ``settle_s`` for the last deliveries, then
   samples ``rss_after``.

Figures: flood produce rate; prod latency p50/p99/max (the goal is p99 under 1 s);
read-node RSS before, after and at the peak, and growth (after - before and peak -
before; the goal is at most 100 MB); prod messages ``lost`` (acknowledged, never
delivered); ``crossed``: deliveries of another env to the prod consumer (must be 0).
Prod order is not checked here: open-loop requests overlap in flight, so two holding
one key may be appended in either order (``vpq bench hotkey`` and ``catchup`` check order).
RSS figures are ``None`` when the platform's processes are not visible from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from vpq.load.checks import DeliveryChecker
from vpq.load.payload import make_payload, parse_payload
from vpq.load.platform_bench.backlog import as_json_values, produce_ordered
from vpq.load.platform_bench.target import scratch_queue
from vpq.load.scenarios.open_loop import run_open_loop
from vpq.load.stats import OpenLoopSchedule, summarize_ms
from vpq.sdk.client import AsyncClient
from vpq.sdk.consumer import Consumer
from vpq.sdk.errors import VpqClientError
from vpq.sdk.models import Message

Echo = Callable[[str], None]
RssSampler = Callable[[], "int | None"]
GROUP = "bench-envflood"
MB = 1_000_000


@dataclass(frozen=True)
class EnvfloodConfig:
    flood: int = 1_000_000
    flood_bytes: int = 100
    flood_keys: int = 1_000
    flood_batch: int = 1_000
    flood_workers: int = 4
    flood_env: str = "test"
    prod_rate: float = 200.0
    prod_seconds: float = 10.0
    prod_batch: int = 2
    prod_keys: int = 100
    prod_bytes: int = 100
    max_messages: int = 100
    settle_s: float = 30.0
    rss_every_s: float = 0.5
    virtual_partitions: int = 16

    def __post_init__(self) -> None:
        if min(self.flood, self.flood_keys, self.flood_batch, self.flood_workers, self.prod_batch, self.prod_keys) < 1:
            raise ValueError("flood, keys, batches and workers must be >= 1")
        if self.prod_rate <= 0 or self.prod_seconds <= 0 or self.settle_s < 0 or self.rss_every_s <= 0:
            raise ValueError("prod_rate, prod_seconds and rss_every_s must be > 0, settle_s >= 0")
        if min(self.flood_bytes, self.prod_bytes) < 32 or not 1 <= self.max_messages <= 1000:
            raise ValueError("message sizes must be >= 32 bytes, max_messages within 1..1000")
        if self.flood_env == "prod":
            raise ValueError("the flood's env must not be prod")

    @classmethod
    def quick(cls) -> EnvfloodConfig:
        """A form that runs in seconds (tests, smoke checks)."""
        return cls(flood=50_000, prod_rate=100.0, prod_seconds=3.0, settle_s=15.0)


class _Prod:
    """First deliveries of prod messages and their latencies (see the module docstring)."""

    def __init__(self) -> None:
        self.base = 0.0
        self.checker = DeliveryChecker(order_required=False)
        self.latencies: list[float] = []
        self.crossed = 0
        self.expected_total = -1
        self.done = asyncio.Event()

    def receive(self, message: Message) -> None:
        if message.env != "prod":
            self.crossed += 1
            return
        stamp = parse_payload(message.value)
        if self.checker.observe(stamp.key, stamp.seq):
            self.latencies.append(time.monotonic() - (self.base + stamp.sched_us / 1e6))
            self.check_done()

    def check_done(self) -> None:
        if 0 <= self.expected_total <= self.checker.expected_seen:
            self.done.set()


class _RssWatch:
    """Samples the read nodes' RSS every ``every_s`` in the background; keeps the peak."""

    def __init__(self, sample: RssSampler, every_s: float) -> None:
        self._sample = sample
        self._every_s = every_s
        self.peak: int | None = None
        self._task: asyncio.Task[None] | None = None

    def now(self) -> int | None:
        value = self._sample()
        if value is not None and (self.peak is None or value > self.peak):
            self.peak = value
        return value

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._every_s)
            await asyncio.to_thread(self.now)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _mb(value: int | None) -> float | None:
    return round(value / MB, 1) if value is not None else None


async def run_envflood(
    client: AsyncClient, cfg: EnvfloodConfig, echo: Echo = lambda _: None, read_node_rss: RssSampler | None = None
) -> dict[str, Any]:
    """Run the benchmark against the gateway ``client`` talks to; ``read_node_rss``
    answers the read nodes' RSS in bytes (or ``None``). Answers the figures."""
    prod = _Prod()
    watch = _RssWatch(read_node_rss or (lambda: None), cfg.rss_every_s)
    send_errors = 0
    async with scratch_queue(client, "bench-envflood", virtual_partitions=cfg.virtual_partitions) as queue:
        name = queue["name"]

        async def handle(message: Message) -> None:
            prod.receive(message)

        consumer = Consumer(client, name, GROUP, handle, start="earliest", max_messages=cfg.max_messages,
                            wait_ms=1000, concurrency=1)
        await consumer.start()
        rss_before = watch.now()
        watch.start()
        try:
            echo(f"flood: {cfg.flood:,} messages with X-Env: {cfg.flood_env} ({cfg.flood_bytes} B, "
                 f"{cfg.flood_keys} keys); the group has one prod consumer")

            async def flood_send(pairs: Sequence[tuple[str, bytes]]) -> None:
                await client.produce(name, as_json_values(pairs), env=cfg.flood_env)

            flood_rate = await produce_ordered(flood_send, cfg.flood, cfg.flood_keys, message_bytes=cfg.flood_bytes,
                                               batch=cfg.flood_batch, workers=cfg.flood_workers)
            rss_flooded = watch.now()
            echo(f"flood produced at {flood_rate:,.0f} msg/s; prod at {cfg.prod_rate:g} msg/s for "
                 f"{cfg.prod_seconds:g} s")
            schedule = OpenLoopSchedule(rate_per_s=cfg.prod_rate / cfg.prod_batch, duration_s=cfg.prod_seconds)

            async def prod_send(i: int, due: float) -> None:
                nonlocal send_errors
                sched_us = int((due - prod.base) * 1e6)
                idents = [(f"prod-{(i * cfg.prod_batch + j) % cfg.prod_keys}", i * cfg.prod_batch + j)
                          for j in range(cfg.prod_batch)]
                messages = [{"key": k, "value": make_payload(k, s, sched_us, size=cfg.prod_bytes).decode("ascii")}
                            for k, s in idents]
                try:
                    await client.produce(name, messages)
                except VpqClientError:
                    send_errors += 1
                    return
                for k, s in idents:
                    prod.checker.expect(k, s)

            prod.base = time.monotonic()
            await run_open_loop(schedule, prod_send)
            prod.expected_total = prod.checker.expected_count
            prod.check_done()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(prod.done.wait(), cfg.settle_s)
            rss_after = watch.now()
        finally:
            await watch.stop()
            await consumer.stop(timeout_s=5.0)

    report = prod.checker.report()
    lat = summarize_ms(prod.latencies)
    growth = rss_after - rss_before if rss_after is not None and rss_before is not None else None
    peak_growth = watch.peak - rss_before if watch.peak is not None and rss_before is not None else None
    return {
        "bench": "envflood",
        "flood": cfg.flood,
        "flood_produce_per_s": round(flood_rate, 1),
        "prod_expected": report.expected,
        "prod_delivered": report.expected - report.lost,
        "prod_p50_ms": lat.get("p50_ms"),
        "prod_p99_ms": lat.get("p99_ms"),
        "prod_max_ms": lat.get("max_ms"),
        "rss_before_mb": _mb(rss_before),
        "rss_after_flood_mb": _mb(rss_flooded),
        "rss_after_mb": _mb(rss_after),
        "rss_peak_mb": _mb(watch.peak),
        "rss_growth_mb": _mb(growth),
        "rss_peak_growth_mb": _mb(peak_growth),
        "lost": report.lost,
        "duplicates": report.duplicates,
        "unexpected": report.unexpected,
        "crossed": prod.crossed,
        "send_errors": send_errors,
        "config": asdict(cfg),
    }
