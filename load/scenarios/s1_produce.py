"""Scenario 1: durable produce throughput of 1 KiB messages, batch 1 and batch 100.

``producers`` closed-loop tasks send batches of ``b`` messages to one queue (one
request / pipeline / confirm round per batch, waiting for the durable acknowledgement)
for ``s1_duration_s`` or up to ``s1_max_messages[b]`` messages. Every acknowledged
message is then read back by one consumer and checked for loss, duplicates and
per-key order.
"""

from __future__ import annotations

from typing import Any

from vpq.load.checks import DeliveryChecker
from vpq.load.scenarios.common import Context, drain, produce_closed

TITLE = "durable produce throughput, 1 KiB, batch 1 and 100"
BATCHES = (1, 100)


async def run(ctx: Context) -> dict[str, Any]:
    system, p = ctx.system, ctx.profile
    out: dict[str, Any] = {"producers": p.producers}
    for b in BATCHES:
        queue = f"s1-b{b}"
        await system.setup([queue], ordered=True, shards=1)
        checker = DeliveryChecker(order_required=True)
        produced = await produce_closed(
            system,
            [queue],
            producers=p.producers,
            batch=b,
            max_messages=p.s1_max_messages[b],
            duration_s=p.s1_duration_s,
            keys_per_producer=4,
            on_acked=lambda _q, k, s: checker.expect(k, s),
            message_bytes=p.message_bytes,
        )
        ctx.echo(f"  batch {b}: {produced.messages} messages in {produced.seconds:.2f}s; reading back")
        readback = await drain(
            system, queue, checker, members=1, ordered=True, batch=p.drain_batch, timeout_s=p.scenario_timeout_s / 3
        )
        await system.delete([queue])
        out[f"batch_{b}"] = {
            **produced.figures(p.message_bytes),
            "readback": readback.figures(),
            "check": checker.report().to_json(),
        }
    return out
