"""Scenario 5: catch-up read of a backlog while producing.

1. Idle: after a short unmeasured warm-up, produce open loop at ``s5_rate`` for
   ``s5_duration_s`` (batch 1) and record the produce latency (acknowledgement minus
   scheduled time).
2. Load a backlog into the same queue (closed loop, batch 100) for ``s5_backlog_s`` or
   ``s5_backlog`` messages, whichever comes first.
3. Start a catch-up reader in a separate process (:mod:`load.scenarios.catchup_reader`)
   and, while it reads, produce open loop again at the same rate until the reader has
   caught up (or ``s5_catchup_max_s``): the produce latency during catch-up. The reader
   goes on until it has read everything, which is checked for loss, duplicates and
   per-key order.

Figures: producer p99 during catch-up against idle (1.0: the reader does not disturb
writers at all), and the reader's catch-up rate.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from multiprocessing.connection import Connection
from typing import Any

from vpq.load.checks import DeliveryChecker
from vpq.load.payload import KeySequencer
from vpq.load.scenarios.catchup_reader import reader_main
from vpq.load.scenarios.common import Context, produce_closed
from vpq.load.scenarios.open_loop import OpenLoopProducer, run_open_loop, warm_up
from vpq.load.stats import OpenLoopSchedule, summarize_ms

TITLE = "catch-up read of a backlog while producing: producer p99 during catch-up vs idle"
KEYS = 64


async def _recv(conn: Connection, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while not conn.poll():
        if time.monotonic() >= deadline:
            raise TimeoutError("the catch-up reader did not answer in time")
        await asyncio.sleep(0.005)
    message = conn.recv()
    if message[0] == "error":
        raise RuntimeError(f"catch-up reader failed: {message[1]}")
    return message


async def run(ctx: Context) -> dict[str, Any]:
    system, p = ctx.system, ctx.profile
    queue = "s5"
    await system.setup([queue], ordered=True, shards=1)
    checker = DeliveryChecker(order_required=True)
    await warm_up(system, queue, checker, p.message_bytes)
    seqs = KeySequencer()
    base = time.monotonic()

    idle = OpenLoopProducer(system, queue, checker, keys=KEYS, base=base, message_bytes=p.message_bytes, seqs=seqs)
    await run_open_loop(OpenLoopSchedule(p.s5_rate, p.s5_duration_s), idle.send)

    # the reader process starts (imports, connects) while the unmeasured backlog loads
    mp = multiprocessing.get_context("spawn")
    parent_conn, child_conn = mp.Pipe()
    deadline_s = p.scenario_timeout_s / 2
    child = mp.Process(
        target=reader_main, args=(system.attach_spec(), queue, p.drain_batch, child_conn, deadline_s), daemon=True
    )
    child.start()
    child_conn.close()
    caught_up_at: float | None = None
    deliveries: list[tuple[str, int, float]] | None = None
    during = OpenLoopProducer(system, queue, checker, keys=KEYS, base=base, message_bytes=p.message_bytes, seqs=seqs)
    try:
        backlog = await produce_closed(
            system,
            [queue],
            producers=min(p.producers, 8),
            batch=100,
            max_messages=p.s5_backlog,
            duration_s=p.s5_backlog_s,
            keys_per_producer=8,
            on_acked=lambda _q, k, s: checker.expect(k, s),
            message_bytes=p.message_bytes,
        )
        in_queue = checker.expected_count
        ctx.echo(f"  backlog of {backlog.messages} loaded ({in_queue} in the queue); catching up while producing")
        await _recv(parent_conn, 30.0)  # ready
        parent_conn.send(("go", in_queue))
        _, started_at = await _recv(parent_conn, 30.0)
        stop = asyncio.Event()
        producing = asyncio.create_task(
            run_open_loop(OpenLoopSchedule(p.s5_rate, p.s5_catchup_max_s), during.send, stop=stop)
        )
        try:
            kind, value = await _recv(parent_conn, deadline_s)
        finally:
            stop.set()
            await producing
        if kind == "caught_up":
            caught_up_at = value
            parent_conn.send(("target", checker.expected_count))
            _, deliveries = await _recv(parent_conn, deadline_s + 15.0)
        else:  # "done": the reader ran out of time before catching up
            deliveries = value
    finally:
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()
        parent_conn.close()
    assert deliveries is not None
    for key, seq, _t in deliveries:
        checker.observe(key, seq)
    await system.delete([queue])

    idle_stats = summarize_ms(idle.ack_latency)
    end = caught_up_at if caught_up_at is not None else float("inf")
    during_stats = summarize_ms([lat for due, lat in during.samples if due <= end])
    ratio = (
        round(during_stats["p99_ms"] / idle_stats["p99_ms"], 2)
        if "p99_ms" in idle_stats and "p99_ms" in during_stats and idle_stats["p99_ms"] > 0
        else None
    )
    first_t = deliveries[0][2] if deliveries else None
    catchup_s = caught_up_at - first_t if caught_up_at is not None and first_t is not None else None
    return {
        "rate_per_s": p.s5_rate,
        "backlog": backlog.messages,
        "in_queue_at_start": in_queue,
        "idle": idle_stats,
        "catchup": during_stats,
        "p99_ratio_catchup_vs_idle": ratio,
        "caught_up": caught_up_at is not None,
        "reader_start_s": round(started_at - base, 3),
        "catchup_read_s": round(catchup_s, 3) if catchup_s is not None else None,
        "reader_msgs_per_s": round(in_queue / catchup_s, 1) if catchup_s else None,
        "errors": len(idle.errors) + len(during.errors) + backlog.errors,
        "check": checker.report().to_json(),
    }
