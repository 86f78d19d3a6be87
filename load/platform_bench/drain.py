"""``vpq bench drain``: how draining a backlog scales from 1 consumer to ``consumers``.

1. A queue with ``virtual_partitions`` (256) virtual partitions is created; the
   platform spreads them over its physical partitions (4 when the bench starts the
   platform). Its placement is reported, and again at the end (with fewer virtual
   partitions than consumers, the platform's automatic split grows the queue).
2. A backlog of ``backlog`` messages over ``keys`` keys is produced: ``produce_workers``
   sender tasks, each owning a disjoint set of keys and sending its messages in order,
   one batch of ``produce_batch`` at a time, so every key's messages are appended in
   sequence order (key ``k``, seq 0, 1, 2, ...).
3. Baseline: a group with ONE SDK :class:`sdk.consumer.Consumer` (concurrency 1:
   messages handled one after the other, each costing ``work_ms`` of
   ``asyncio.sleep``, acked after each poll batch) runs for ``single_s`` seconds.
4. A second group with ``consumers`` such consumers, all started at once, drains the
   whole backlog (bounded by ``timeout_s``). Every first delivery is checked against
   the produced messages: ``lost``, ``duplicates`` (at-least-once redeliveries),
   ``reordered`` (a key's message handled after a later one of the same key).

Rates are steady-state rates (:func:`load.platform_bench.measure.window_rate`: between
the 10 % and 90 % marks of the first deliveries, the same rule for both groups), so the
consumers' joins and the last stragglers do not distort the ratio; the whole drain's
rate (first join to last message) is reported too.
``speedup = rate_many / rate_one``, ``efficiency = speedup / consumers``. All consumers
run in this one process, so its CPU use during the drain is reported as well: near
1.0 core, the client rather than the platform was the limit.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from vpq.load.checks import DeliveryChecker
from vpq.load.payload import parse_payload
from vpq.load.platform_bench.backlog import as_json_values, produce_ordered
from vpq.load.platform_bench.measure import (
    speedup_and_efficiency,
    spread,
    window_rate,
)
from vpq.load.platform_bench.proc_cpu import cpu_shares, own_cpu_seconds
from vpq.load.platform_bench.target import scratch_queue
from vpq.sdk.client import AsyncClient
from vpq.sdk.consumer import Consumer
from vpq.sdk.errors import VpqClientError
from vpq.sdk.models import Message

Echo = Callable[[str], None]


@dataclass(frozen=True)
class DrainConfig:
    backlog: int = 40_000
    consumers: int = 64
    work_ms: float = 10.0
    single_s: float = 8.0
    virtual_partitions: int = 256  # 4 per consumer: one vp each leaves consumers as uneven as the key hash
    keys: int = 8192
    message_bytes: int = 256
    max_messages: int = 20
    produce_batch: int = 500
    produce_workers: int = 8
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if self.backlog < 1 or self.consumers < 1 or self.keys < 1 or self.max_messages < 1:
            raise ValueError("backlog, consumers, keys and max_messages must be >= 1")
        if self.produce_batch < 1 or self.produce_workers < 1:
            raise ValueError("produce_batch and produce_workers must be >= 1")
        if self.work_ms < 0 or self.single_s <= 0 or self.timeout_s <= 0:
            raise ValueError("work_ms must be >= 0, single_s and timeout_s > 0")
        if self.message_bytes < 32:
            raise ValueError("message_bytes must be >= 32")


async def produce_backlog(client: AsyncClient, queue: str, cfg: DrainConfig, checker: DeliveryChecker) -> float:
    """Produce the backlog (see the module docstring, step 2); every acknowledged message
    goes to ``checker.expect``. Answers the messages per second it took."""

    async def send(pairs: Sequence[tuple[str, bytes]]) -> None:
        await client.produce(queue, as_json_values(pairs))

    return await produce_ordered(send, cfg.backlog, cfg.keys, message_bytes=cfg.message_bytes,
                                 batch=cfg.produce_batch, workers=cfg.produce_workers, on_acked=checker.expect)


class _Group:
    """The consumers of one group and what they handled."""

    def __init__(self, client: AsyncClient, queue: str, group: str, count: int, cfg: DrainConfig,
                 checker: DeliveryChecker | None) -> None:
        self.checker = checker
        self.first_times: list[float] = []
        self.per_member: Counter[int] = Counter()
        self.handled = 0
        self.done = asyncio.Event()
        self.target = -1
        self._work = cfg.work_ms / 1000.0
        self.consumers = [
            Consumer(client, queue, group, self._handler(m), start="earliest",
                     max_messages=cfg.max_messages, wait_ms=500, concurrency=1)
            for m in range(count)
        ]

    def _handler(self, member: int) -> Callable[[Message], Any]:
        async def handle(message: Message) -> None:
            now = time.monotonic()
            self.handled += 1
            stamp = parse_payload(message.value)
            first = self.checker.observe(stamp.key, stamp.seq) if self.checker is not None else True
            if first:
                self.first_times.append(now)
                self.per_member[member] += 1
                if 0 <= self.target <= len(self.first_times):
                    self.done.set()
            if self._work > 0:
                await asyncio.sleep(self._work)
        return handle

    async def start(self) -> None:
        await asyncio.gather(*(c.start() for c in self.consumers))

    async def stop(self) -> None:
        await asyncio.gather(*(c.stop(timeout_s=5.0) for c in self.consumers))


def _placement_summary(placement: list[int]) -> dict[str, Any]:
    counts = Counter(placement)
    return {"physical_partitions_used": len(counts), "vps_per_pp": {str(pp): n for pp, n in sorted(counts.items())}}


async def run_drain(
    client: AsyncClient,
    cfg: DrainConfig,
    echo: Echo = lambda _: None,
    platform_cpu: Callable[[], dict[str, float]] | None = None,
) -> dict[str, Any]:
    """Run the benchmark against the gateway ``client`` talks to; answers the figures.
    ``platform_cpu`` (e.g. :func:`load.platform_bench.proc_cpu.cpu_by_role` of the
    platform's supervisor) samples the platform's CPU seconds per role, for the cores
    each role kept busy during the drain."""
    checker = DeliveryChecker(order_required=True)
    async with scratch_queue(client, "bench-drain", virtual_partitions=cfg.virtual_partitions) as queue:
        name = queue["name"]
        placement = _placement_summary(list(queue.get("placement") or []))
        echo(
            f"queue {name}: {queue.get('virtual_partitions')} virtual partitions on "
            f"{placement['physical_partitions_used']} physical partition(s) {placement['vps_per_pp']}"
        )
        echo(f"producing a backlog of {cfg.backlog} messages ({cfg.message_bytes} B, {cfg.keys} keys)")
        produce_rate = await produce_backlog(client, name, cfg, checker)

        echo(f"1 consumer, {cfg.work_ms:g} ms of work per message, for {cfg.single_s:g} s")
        one = _Group(client, name, "drain-one", 1, cfg, None)
        await one.start()
        await asyncio.sleep(cfg.single_s)
        await one.stop()
        rate_one = window_rate(one.first_times)

        echo(f"{cfg.consumers} consumers drain the backlog (at most {cfg.timeout_s:g} s)")
        many = _Group(client, name, "drain-many", cfg.consumers, cfg, checker)
        many.target = cfg.backlog
        cpu_before = own_cpu_seconds()
        platform_before = platform_cpu() if platform_cpu is not None else {}
        started = time.monotonic()
        await many.start()
        joined_s = time.monotonic() - started
        timed_out = False
        try:
            await asyncio.wait_for(many.done.wait(), cfg.timeout_s)
        except TimeoutError:
            timed_out = True
            echo(f"the drain did not finish within {cfg.timeout_s:g} s")
        drained_at = time.monotonic()
        client_cores = (own_cpu_seconds() - cpu_before) / (drained_at - started)
        platform_cores = cpu_shares(platform_before, platform_cpu(), drained_at - started) if platform_cpu else {}
        try:
            info = await client.group(name, "drain-many")
            final = await client.get_queue(name)
        except VpqClientError:  # diagnostics only
            info, final = {}, {}
        await many.stop()

    rate_many = window_rate(many.first_times)
    whole_s = (max(many.first_times) - started) if many.first_times else drained_at - started
    rate_whole = len(many.first_times) / whole_s if whole_s > 0 else 0.0
    speedup, efficiency = speedup_and_efficiency(rate_one, rate_many, cfg.consumers)
    _, efficiency_whole = speedup_and_efficiency(rate_one, rate_whole, cfg.consumers)
    report = checker.report()
    per_member = [many.per_member.get(m, 0) for m in range(cfg.consumers)]
    vps = [len(m.get("virtual_partitions") or []) for m in (info.get("members") or [])]
    ideal = 1000.0 / cfg.work_ms if cfg.work_ms > 0 else None
    return {
        "bench": "drain",
        "consumers": cfg.consumers,
        "rate_one_per_s": round(rate_one, 1),
        "rate_many_per_s": round(rate_many, 1),
        "speedup": round(speedup, 2),
        "efficiency": round(efficiency, 3),
        "rate_many_whole_drain_per_s": round(rate_whole, 1),
        "efficiency_whole_drain": round(efficiency_whole, 3),
        "ideal_per_consumer_per_s": ideal,
        "single_consumer_share_of_ideal": round(rate_one / ideal, 3) if ideal else None,
        "drain_s": round(whole_s, 2),
        "client_cores_during_drain": round(client_cores, 2),
        "platform_cores_during_drain": platform_cores,
        "join_s": round(joined_s, 2),
        "timed_out": timed_out,
        "backlog_produce_per_s": round(produce_rate, 1),
        "messages_per_consumer": spread(per_member),
        "vps_per_consumer": spread(vps),
        "lost": report.lost,
        "duplicates": report.duplicates,
        "reordered": report.reordered,
        "unexpected": report.unexpected,
        "order_and_loss_ok": report.lost + report.reordered + report.unexpected == 0,
        "placement": placement,
        "virtual_partitions_at_end": final.get("virtual_partitions"),
        "placement_at_end": _placement_summary(list(final.get("placement") or [])),
        "config": asdict(cfg),
    }
