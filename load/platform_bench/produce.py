"""``vpq bench produce``: produce throughput through the gateway.

``in_flight`` sender tasks each send one produce request at a time (so ``in_flight``
requests are always outstanding), every request a batch of ``batch`` messages of
``message_bytes`` bytes of JSON string value, with keys cycling over ``keys`` keys.
The gateway answers 200 only once the batch is fsynced (the platform's default
``fsync_policy = "group"``). Requests go through the SDK's
:meth:`sdk.client.AsyncClient.produce` (each batch is serialised right before its request,
in one call, as a user's code would). After ``warmup_s`` seconds, ``seconds`` seconds
are measured: messages of the requests answered in the window (per second and MB/s,
MB = 10**6 bytes of message value) and the latency of the requests sent and answered
in it. The client process's CPU use is reported too, to show whether the client
rather than the platform was the limit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from vpq.load.payload import make_payload
from vpq.load.platform_bench.measure import RequestRecord, message_identity, requests_in_window
from vpq.load.platform_bench.proc_cpu import own_cpu_seconds
from vpq.load.platform_bench.target import scratch_queue
from vpq.load.stats import summarize_ms
from vpq.sdk.client import AsyncClient
from vpq.sdk.errors import VpqClientError

Echo = Callable[[str], None]


@dataclass(frozen=True)
class ProduceConfig:
    seconds: float = 10.0
    warmup_s: float = 3.0
    batch: int = 100
    in_flight: int = 8
    message_bytes: int = 1024
    keys: int = 1024
    virtual_partitions: int = 16

    def __post_init__(self) -> None:
        if self.seconds <= 0 or self.warmup_s < 0:
            raise ValueError("seconds must be > 0 and warmup_s >= 0")
        if self.batch < 1 or self.in_flight < 1 or self.keys < 1:
            raise ValueError("batch, in_flight and keys must be >= 1")
        if self.message_bytes < 32:
            raise ValueError("message_bytes must be >= 32")


async def run_produce(client: AsyncClient, cfg: ProduceConfig, echo: Echo = lambda _: None) -> dict[str, Any]:
    """Run the benchmark against the gateway ``client`` talks to; answers the figures."""
    async with scratch_queue(client, "bench-produce", virtual_partitions=cfg.virtual_partitions) as queue:
        name = queue["name"]
        records: list[RequestRecord] = []
        counter = [0]
        errors: list[str] = []
        loop_start = time.monotonic()
        measure_from = loop_start + cfg.warmup_s
        measure_to = measure_from + cfg.seconds

        def next_batch() -> list[dict[str, Any]]:
            first = counter[0]
            counter[0] += cfg.batch
            out = []
            for i in range(first, first + cfg.batch):
                key, seq = message_identity(i, cfg.keys)
                out.append({"key": key, "value": make_payload(key, seq, size=cfg.message_bytes).decode("ascii")})
            return out

        async def sender() -> None:
            while time.monotonic() < measure_to:
                encoded = next_batch()
                started = time.monotonic()
                try:
                    await client.produce(name, encoded)
                    ok = True
                except VpqClientError as exc:
                    ok = False
                    if len(errors) < 5:
                        errors.append(f"{type(exc).__name__}: {exc}"[:200])
                records.append(RequestRecord(started, time.monotonic(), len(encoded), ok))

        echo(
            f"producing {cfg.message_bytes} B messages, batches of {cfg.batch}, {cfg.in_flight} requests in flight: "
            f"{cfg.warmup_s:g} s warm-up, {cfg.seconds:g} s measured"
        )
        cpu_before: float | None = None

        async def mark_cpu() -> None:
            nonlocal cpu_before
            await asyncio.sleep(max(0.0, measure_from - time.monotonic()))
            cpu_before = own_cpu_seconds()

        marker = asyncio.create_task(mark_cpu())
        await asyncio.gather(*(sender() for _ in range(cfg.in_flight)))
        cpu_after = own_cpu_seconds()
        await marker
        window = requests_in_window(records, measure_from, measure_to)
        info = await client.get_queue(name)

    latency = summarize_ms(window.latencies)
    mb_per_s = window.messages_per_s * cfg.message_bytes / 1e6
    wall = time.monotonic() - measure_from
    return {
        "bench": "produce",
        "messages_per_s": round(window.messages_per_s, 1),
        "mb_per_s": round(mb_per_s, 2),
        "request_p50_ms": latency.get("p50_ms"),
        "request_p99_ms": latency.get("p99_ms"),
        "request_max_ms": latency.get("max_ms"),
        "requests": window.requests,
        "messages": window.messages,
        "errors": window.errors,
        "error_samples": errors,
        "measured_s": cfg.seconds,
        "client_cpu_share": round((cpu_after - (cpu_before or cpu_after)) / wall, 2) if wall > 0 else None,
        "queue_messages_total": (info.get("traffic") or {}).get("messages_total"),
        "config": asdict(cfg),
    }
