"""The catch-up reader of scenario 5, run in a child process so that its client-side
work does not share an event loop (or a CPU core's time slices) with the producer
whose latency is measured.

Protocol over the pipe: the child connects and sends ``("ready", t)``, waits for
``("go", backlog)``, starts its consumer, sends ``("started", t)``, and sends
``("caught_up", t)`` when it has read ``backlog`` distinct messages (everything that
was in the queue when it started: the queue is FIFO, so the live messages come after).
It reads on until it has seen as many distinct messages as the parent's ``("target",
n)`` (sent when production is over) or until ``deadline_s`` passed, and finally sends
``("done", deliveries)``: ``(key, seq, t)`` in handling order. Times are on the
``time.monotonic`` clock, which all processes of the machine share. On failure it
sends ``("error", text)``.
"""

from __future__ import annotations

import asyncio
import time
from multiprocessing.connection import Connection
from typing import Any

from vpq.common import event_loop
from vpq.load.payload import parse_payload
from vpq.load.peers.registry import from_spec


async def _read(spec: dict[str, Any], queue: str, batch: int, conn: Connection, deadline_s: float) -> None:
    system = from_spec(spec)
    await system.start()
    system.register([queue], ordered=True, shards=1)
    conn.send(("ready", time.monotonic()))
    deadline = time.monotonic() + deadline_s
    while not conn.poll():
        if time.monotonic() >= deadline:
            await system.stop()
            raise TimeoutError("no go from the parent")
        await asyncio.sleep(0.005)
    message = conn.recv()
    backlog = int(message[1])
    deliveries: list[tuple[str, int, float]] = []
    distinct: set[tuple[str, int]] = set()
    caught_up = asyncio.Event()

    async def handler(key: str, payload: bytes) -> None:
        stamp = parse_payload(payload)
        now = time.monotonic()
        deliveries.append((stamp.key, stamp.seq, now))
        distinct.add((stamp.key, stamp.seq))
        if not caught_up.is_set() and len(distinct) >= backlog:
            caught_up.set()
            conn.send(("caught_up", now))

    try:
        handle = await system.consume(queue, handler, ordered=True, member=0, members=1, batch=batch)
        conn.send(("started", time.monotonic()))
        target: int | None = None
        while time.monotonic() < deadline:
            if target is None and conn.poll():
                message = conn.recv()
                if message[0] == "target":
                    target = int(message[1])
            if target is not None and len(distinct) >= target:
                break
            await asyncio.sleep(0.01)
        await handle.stop()
    finally:
        await system.stop()
    conn.send(("done", deliveries))


def reader_main(spec: dict[str, Any], queue: str, batch: int, conn: Connection, deadline_s: float) -> None:
    """Child-process entry point (see the module docstring)."""
    try:
        event_loop.run(_read(spec, queue, batch, conn, deadline_s))
    except Exception as exc:  # reported to the parent, which records the scenario as failed
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()
