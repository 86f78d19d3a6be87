"""Scenario 2: end-to-end latency at a fixed rate, open loop.

Messages are scheduled at ``s2_rate`` per second for ``s2_duration_s`` over ``s2_keys``
keys and sent one per request (see :mod:`load.scenarios.open_loop`), after a short
unmeasured warm-up. One consumer
reads the queue meanwhile. Latencies are measured from the *scheduled* time: produce
acknowledgement, and end to end (the consumer's handler starts). ``sustained`` says
whether the system kept up with the rate (if not, its latencies mostly measure the
queue of late sends).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from vpq.load.checks import DeliveryChecker
from vpq.load.scenarios.common import Context, drain
from vpq.load.scenarios.open_loop import OpenLoopProducer, run_open_loop, warm_up
from vpq.load.stats import OpenLoopSchedule, summarize_ms

TITLE = "end-to-end latency at a fixed rate (open loop, from the scheduled send time)"


async def run(ctx: Context) -> dict[str, Any]:
    system, p = ctx.system, ctx.profile
    queue = "s2"
    await system.setup([queue], ordered=True, shards=1)
    checker = DeliveryChecker(order_required=True)
    await warm_up(system, queue, checker, p.message_bytes)
    schedule = OpenLoopSchedule(p.s2_rate, p.s2_duration_s)
    producer = OpenLoopProducer(system, queue, checker, keys=p.s2_keys, base=time.monotonic(), message_bytes=p.message_bytes)
    received: dict[tuple[str, int], float] = {}
    producing = asyncio.Event()

    window: list[float] = []

    async def produce_all() -> None:
        try:
            window.extend(await run_open_loop(schedule, producer.send))
        finally:
            producing.set()

    task = asyncio.create_task(produce_all())
    try:
        consumed = await drain(
            system,
            queue,
            checker,
            members=1,
            ordered=True,
            batch=100,
            timeout_s=p.s2_duration_s + p.scenario_timeout_s / 3,
            on_delivery=lambda k, s, now: received.setdefault((k, s), now),
            producing=producing,
        )
    finally:
        await task
    await system.delete([queue])
    e2e = [received[ident] - due for ident, due in producer.due_of.items() if ident in received]
    took = window[1] - window[0] if len(window) == 2 else float("inf")
    return {
        "rate_per_s": p.s2_rate,
        # kept up: every send acknowledged, the last within 10% (+50 ms) of the schedule
        "sustained": len(producer.samples) == schedule.count and took <= p.s2_duration_s * 1.1 + 0.05,
        "scheduled": schedule.count,
        "acknowledged": len(producer.ack_latency),
        "errors": len(producer.errors),
        **({"first_error": producer.errors[0]} if producer.errors else {}),
        "produce_ack": summarize_ms(producer.ack_latency),
        "end_to_end": summarize_ms(e2e),
        "consumer": consumed.figures(),
        "check": checker.report().to_json(),
    }
