"""``vpq bench latency``: end-to-end latency at a fixed offered rate (open loop).

The producer's schedule is one batch of ``batch`` messages every ``batch / rate``
seconds (1,000 msg/s in batches of 5: one batch every 5 ms), for ``warmup_s`` then
``seconds`` seconds. Every batch is sent at its scheduled time as its own request,
whether or not earlier ones were answered (open loop: a slow platform shows up as
latency instead of lowering the offered load). Each message carries its scheduled
time; ``consumers`` SDK :class:`sdk.consumer.Consumer` members of one group long-poll
(``wait_ms``) and ack after each poll batch. A message's latency is the time from its
batch's *scheduled* send time to the moment a consumer's handler gets it (first
delivery only). Messages scheduled during the warm-up are delivered and checked but
left out of the figures. After the schedule the run waits up to ``settle_s`` for the
last deliveries; messages acknowledged by the gateway and never delivered are
``lost``. Per-key order is not checked here: batches overlap in flight, so two batches
holding the same key may be appended in either order (``vpq bench drain`` checks
order).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from vpq.load.checks import DeliveryChecker
from vpq.load.payload import make_payload, parse_payload
from vpq.load.platform_bench.measure import message_identity
from vpq.load.platform_bench.target import scratch_queue
from vpq.load.scenarios.open_loop import run_open_loop
from vpq.load.stats import OpenLoopSchedule, percentile, summarize_ms
from vpq.sdk.client import AsyncClient
from vpq.sdk.consumer import Consumer
from vpq.sdk.errors import VpqClientError
from vpq.sdk.models import Message

Echo = Callable[[str], None]
GROUP = "bench-latency"


@dataclass(frozen=True)
class LatencyConfig:
    rate: float = 1000.0
    seconds: float = 10.0
    warmup_s: float = 2.0
    batch: int = 5
    message_bytes: int = 1024
    keys: int = 256
    consumers: int = 1
    max_messages: int = 100
    wait_ms: int = 1000
    settle_s: float = 10.0
    virtual_partitions: int = 16

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.seconds <= 0 or self.warmup_s < 0 or self.settle_s < 0:
            raise ValueError("rate and seconds must be > 0, warmup_s and settle_s >= 0")
        if self.batch < 1 or self.keys < 1 or self.consumers < 1 or self.max_messages < 1:
            raise ValueError("batch, keys, consumers and max_messages must be >= 1")
        if self.message_bytes < 32:
            raise ValueError("message_bytes must be >= 32")

    @property
    def interval_s(self) -> float:
        """Seconds between two scheduled batches."""
        return self.batch / self.rate


class _Collector:
    """First deliveries and their latencies (seconds, ``time.monotonic`` clock). ``base``
    is the origin of the payloads' ``sched_us``; messages due before ``measured_from`` are
    warm-up."""

    def __init__(self) -> None:
        self.base = 0.0
        self.measured_from = 0.0
        self.checker = DeliveryChecker(order_required=False)
        self.latencies: list[float] = []
        self.warm_seen = 0
        self.done = asyncio.Event()
        self.expected_total = -1

    def receive(self, message: Message) -> None:
        now = time.monotonic()
        stamp = parse_payload(message.value)
        if not self.checker.observe(stamp.key, stamp.seq):
            return
        due = self.base + stamp.sched_us / 1e6
        if due >= self.measured_from:
            self.latencies.append(now - due)
        else:
            self.warm_seen += 1
        self.check_done()

    def check_done(self) -> None:
        if self.expected_total >= 0 and self.checker.expected_seen >= self.expected_total:
            self.done.set()

    def finish_expecting(self, total: int) -> None:
        self.expected_total = total
        self.check_done()


async def run_latency(client: AsyncClient, cfg: LatencyConfig, echo: Echo = lambda _: None) -> dict[str, Any]:
    """Run the benchmark against the gateway ``client`` talks to; answers the figures."""
    total_s = cfg.warmup_s + cfg.seconds
    schedule = OpenLoopSchedule(rate_per_s=1.0 / cfg.interval_s, duration_s=total_s)
    lead_s = 0.05
    collector = _Collector()
    ack_latency: list[float] = []
    send_errors: list[str] = []
    error_count = [0]

    async with scratch_queue(client, "bench-latency", virtual_partitions=cfg.virtual_partitions) as queue:
        name = queue["name"]

        async def handler(message: Message) -> None:
            collector.receive(message)

        consumers = [
            Consumer(
                client, name, GROUP, handler,
                start="earliest", max_messages=cfg.max_messages, wait_ms=cfg.wait_ms, concurrency=1,
            )
            for _ in range(cfg.consumers)
        ]
        await asyncio.gather(*(c.start() for c in consumers))

        async def send(i: int, due: float) -> None:
            idents = [message_identity(i * cfg.batch + j, cfg.keys) for j in range(cfg.batch)]
            sched_us = int((due - collector.base) * 1e6)
            messages = [
                {"key": key, "value": make_payload(key, seq, sched_us, size=cfg.message_bytes).decode("ascii")}
                for key, seq in idents
            ]
            try:
                await client.produce(name, messages)
            except VpqClientError as exc:
                error_count[0] += 1
                if len(send_errors) < 5:
                    send_errors.append(f"{type(exc).__name__}: {exc}"[:200])
                return
            now = time.monotonic()
            if due >= collector.measured_from:
                ack_latency.append(now - due)
            for key, seq in idents:
                collector.checker.expect(key, seq)

        echo(
            f"open loop at {cfg.rate:g} msg/s (a batch of {cfg.batch} every {cfg.interval_s * 1000:g} ms), "
            f"{cfg.message_bytes} B messages, {cfg.consumers} consumer(s): "
            f"{cfg.warmup_s:g} s warm-up, {cfg.seconds:g} s measured"
        )
        collector.base = time.monotonic()
        collector.measured_from = collector.base + lead_s + cfg.warmup_s
        start, end = await run_open_loop(schedule, send, lead_s=lead_s)
        collector.finish_expecting(collector.checker.expected_count)
        try:
            await asyncio.wait_for(collector.done.wait(), cfg.settle_s)
        except TimeoutError:
            echo(f"not every message arrived within {cfg.settle_s:g} s of the schedule's end")
        await asyncio.gather(*(c.stop(timeout_s=5.0) for c in consumers))

    report = collector.checker.report()
    measured_msgs = int(cfg.seconds / cfg.interval_s) * cfg.batch
    e2e = summarize_ms(collector.latencies)
    if collector.latencies:
        e2e["p999_ms"] = round(percentile([x * 1000 for x in collector.latencies], 99.9), 3)
    acked = summarize_ms(ack_latency)
    return {
        "bench": "latency",
        "rate": cfg.rate,
        "e2e_p50_ms": e2e.get("p50_ms"),
        "e2e_p99_ms": e2e.get("p99_ms"),
        "e2e_p999_ms": e2e.get("p999_ms"),
        "e2e_max_ms": e2e.get("max_ms"),
        "produce_ack_p50_ms": acked.get("p50_ms"),
        "produce_ack_p99_ms": acked.get("p99_ms"),
        "measured_messages": len(collector.latencies),
        "scheduled_measured_messages": measured_msgs,
        "schedule_s": round(end - start, 3),
        "send_errors": error_count[0],
        "error_samples": send_errors,
        "lost": report.lost,
        "duplicates": report.duplicates,
        "unexpected": report.unexpected,
        "config": asdict(cfg),
    }
