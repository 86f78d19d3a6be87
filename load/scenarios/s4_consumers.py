"""Scenario 4: consumer scaling 1 -> 4 -> 16 -> 64 with 10 ms of work per message.

Per mode (``ordered``: per-key order across the group; ``unordered``) and step ``c``: a
fresh queue is loaded with ``c * s4_messages_per_consumer`` messages over ``s4_keys``
keys, then ``c`` consumers drain it, each handling one message at a time and
"working" ``s4_work_ms`` (an ``asyncio.sleep``, like a call to another service). The
rate is taken from the first delivery to the last. Speed-up is against the same
system's 1-consumer rate; efficiency = speed-up / c (1.0 is ideal).

The peers' best ordered construct is ``s4_shards`` key-hash shards per queue (streams /
quorum queues with single-active-consumer / per-subject pull consumers), each read by
exactly one member: the shard count caps the consumers and must be chosen up front.
vpq's queues keep their default virtual partitions; the platform assigns them.
"""

from __future__ import annotations

from typing import Any

from vpq.load.checks import DeliveryChecker
from vpq.load.scenarios.common import Context, drain, produce_closed

TITLE = "consumer scaling with 10 ms of work per message, ordered by key and unordered"
PRELOAD_BATCH = 100


async def run(ctx: Context) -> dict[str, Any]:
    system, p = ctx.system, ctx.profile
    out: dict[str, Any] = {"work_ms": p.s4_work_ms, "shards_peers": p.s4_shards, "keys": p.s4_keys}
    for mode in ("ordered", "unordered"):
        ordered = mode == "ordered"
        steps: list[dict[str, Any]] = []
        base_rate = 0.0
        for c in p.s4_steps:
            queue = f"s4-{mode}-c{c}"
            await system.setup([queue], ordered=ordered, shards=p.s4_shards)
            checker = DeliveryChecker(order_required=ordered)
            total = c * p.s4_messages_per_consumer
            producers = min(p.producers, 8)
            preload = await produce_closed(
                system,
                [queue],
                producers=producers,
                batch=PRELOAD_BATCH,
                max_messages=total,
                duration_s=p.scenario_timeout_s / 4,
                keys_per_producer=max(1, p.s4_keys // producers),
                on_acked=lambda _q, k, s: checker.expect(k, s),
                message_bytes=p.message_bytes,
            )
            ideal_s = total / c * p.s4_work_ms / 1000.0
            drained = await drain(
                system,
                queue,
                checker,
                members=c,
                ordered=ordered,
                batch=p.s4_batch,
                timeout_s=ideal_s * 4 + 15.0,
                work_s=p.s4_work_ms / 1000.0,
            )
            await system.delete([queue])
            rate = drained.handled / drained.seconds if drained.seconds > 0 else 0.0
            if c == p.s4_steps[0]:
                base_rate = rate / c
            speedup = rate / base_rate if base_rate > 0 else 0.0
            ctx.echo(f"  {mode} {c} consumers: {rate:.0f} msg/s")
            steps.append(
                {
                    "consumers": c,
                    "messages": preload.messages,
                    "preload_errors": preload.errors,
                    **drained.figures(),
                    "ideal_msgs_per_s": round(c * 1000.0 / p.s4_work_ms, 1),
                    "speedup": round(speedup, 2),
                    "efficiency": round(speedup / c, 3) if c else 0.0,
                    "check": checker.report().to_json(),
                }
            )
        out[mode] = steps
    return out
