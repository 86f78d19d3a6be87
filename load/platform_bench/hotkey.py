"""``vpq bench hotkey``: one hot key against the same backlog spread over many keys.

Each round drains two backlogs of ``backlog`` messages, each on a fresh queue
(``ordering: key``), with ONE SDK :class:`sdk.consumer.Consumer` (polls of up to
``max_messages``, no work per message, acks after each poll, the SDK's defaults
otherwise):

* ``hot``: every message on one key;
* ``spread``: the same number of messages over ``spread_keys`` keys.

A backlog is produced completely (:func:`load.platform_bench.backlog.produce_ordered`,
per-key order kept) before its consumer joins, so only the drain is timed: from the
moment the consumer has joined to the first delivery of the last message. Each drain
also reports the messages a poll carried (:mod:`load.platform_bench.poll_counts`). Rounds alternate which
layout drains first (round 0: hot first), so a machine that slows down or speeds up
during the run weighs on both alike; with an even number of rounds (4 by default) each
layout goes first as often as the other, which matters because the first drain of a
round can be the slower one. Figures: per layout the median msg/s over the rounds;
``ratio`` = median hot / median spread (the goal is at least 0.5), and each round's own
ratio. Every first delivery is checked (lost, duplicates, reordered,
unexpected); a drain that does not end within ``timeout_s`` counts its missing
messages as lost.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from vpq.load.checks import DeliveryChecker
from vpq.load.payload import parse_payload
from vpq.load.platform_bench.backlog import as_json_values, produce_ordered
from vpq.load.platform_bench.measure import median, median_or_none
from vpq.load.platform_bench.poll_counts import messages_per_poll, poll_counts
from vpq.load.platform_bench.proc_cpu import own_cpu_seconds
from vpq.load.platform_bench.target import scratch_queue
from vpq.sdk.client import AsyncClient
from vpq.sdk.consumer import Consumer
from vpq.sdk.models import Message

Echo = Callable[[str], None]
LAYOUTS = ("hot", "spread")


@dataclass(frozen=True)
class HotkeyConfig:
    backlog: int = 5_000
    spread_keys: int = 1_000
    max_messages: int = 500
    message_bytes: int = 256
    rounds: int = 4
    timeout_s: float = 120.0
    virtual_partitions: int = 16
    produce_batch: int = 500

    def __post_init__(self) -> None:
        if self.backlog < 1 or self.spread_keys < 1 or self.rounds < 1:
            raise ValueError("backlog, spread_keys and rounds must be >= 1")
        if not 1 <= self.max_messages <= 1000:
            raise ValueError("max_messages must be within 1..1000")
        if self.message_bytes < 32 or self.timeout_s <= 0:
            raise ValueError("message_bytes must be >= 32 and timeout_s > 0")

    @classmethod
    def quick(cls) -> HotkeyConfig:
        """A form that runs in seconds (tests, smoke checks)."""
        return cls(backlog=1_000, spread_keys=200, rounds=1, timeout_s=60.0)


async def drain_with_one_consumer(
    client: AsyncClient,
    queue: str,
    group: str,
    checker: DeliveryChecker,
    *,
    max_messages: int,
    timeout_s: float,
) -> dict[str, Any]:
    """Drain every message ``checker`` expects with one SDK consumer (see the module
    docstring); answers seconds, msg/s, the client's CPU seconds and the check counts."""
    target = checker.expected_count
    done = asyncio.Event()
    last = [0.0]

    async def handle(message: Message) -> None:
        stamp = parse_payload(message.value)
        if checker.observe(stamp.key, stamp.seq):
            last[0] = time.monotonic()
            if checker.expected_seen >= target:
                done.set()

    consumer = Consumer(client, queue, group, handle, start="earliest", max_messages=max_messages,
                        wait_ms=500, concurrency=1)
    polls_before = await poll_counts(client)
    cpu_before = own_cpu_seconds()
    await consumer.start()
    started = time.monotonic()
    timed_out = False
    try:
        await asyncio.wait_for(done.wait(), timeout_s)
    except TimeoutError:
        timed_out = True
    cpu = own_cpu_seconds() - cpu_before
    per_poll = messages_per_poll(polls_before, await poll_counts(client))
    await consumer.stop(timeout_s=5.0)
    report = checker.report()
    seconds = (last[0] - started) if last[0] > 0 else time.monotonic() - started
    seen = report.expected - report.lost
    return {
        "seconds": round(seconds, 3),
        "messages_per_s": round(seen / seconds, 1) if seconds > 0 else 0.0,
        "client_cpu_s": round(cpu, 3),
        "messages_per_poll": per_poll,
        "timed_out": timed_out,
        "lost": report.lost,
        "duplicates": report.duplicates,
        "reordered": report.reordered,
        "unexpected": report.unexpected,
    }


async def _one_layout(client: AsyncClient, cfg: HotkeyConfig, layout: str) -> dict[str, Any]:
    keys = 1 if layout == "hot" else cfg.spread_keys
    checker = DeliveryChecker(order_required=True)
    async with scratch_queue(client, f"bench-hotkey-{layout}", virtual_partitions=cfg.virtual_partitions) as queue:
        name = queue["name"]

        async def send(pairs: Sequence[tuple[str, bytes]]) -> None:
            await client.produce(name, as_json_values(pairs))

        await produce_ordered(send, cfg.backlog, keys, message_bytes=cfg.message_bytes, batch=cfg.produce_batch,
                              workers=4, on_acked=checker.expect)
        figures = await drain_with_one_consumer(client, name, "bench-hotkey", checker,
                                                max_messages=cfg.max_messages, timeout_s=cfg.timeout_s)
    return {"layout": layout, "keys": keys, **figures}


def summarize(rounds: Sequence[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Medians per layout, the ratio of medians, each round's ratio and the worst counts
    of ``rounds`` (each ``{"hot": figures, "spread": figures}``). Pure."""
    hot = median([r["hot"]["messages_per_s"] for r in rounds])
    spread = median([r["spread"]["messages_per_s"] for r in rounds])
    per_round = [
        round(r["hot"]["messages_per_s"] / r["spread"]["messages_per_s"], 4) if r["spread"]["messages_per_s"] else 0.0
        for r in rounds
    ]
    counts = {c: sum(r[layout][c] for r in rounds for layout in LAYOUTS)
              for c in ("lost", "duplicates", "reordered", "unexpected")}
    return {
        "hot_per_s": round(hot, 1),
        "spread_per_s": round(spread, 1),
        "ratio": round(hot / spread, 4) if spread else 0.0,
        "ratio_per_round": per_round,
        "messages_per_poll": {layout: median_or_none([r[layout].get("messages_per_poll") for r in rounds])
                              for layout in LAYOUTS},
        "timed_out": any(r[layout]["timed_out"] for r in rounds for layout in LAYOUTS),
        **counts,
    }


async def run_hotkey(client: AsyncClient, cfg: HotkeyConfig, echo: Echo = lambda _: None) -> dict[str, Any]:
    """Run the benchmark against the gateway ``client`` talks to; answers the figures."""
    rounds: list[dict[str, dict[str, Any]]] = []
    for i in range(cfg.rounds):
        order = LAYOUTS if i % 2 == 0 else LAYOUTS[::-1]
        got: dict[str, dict[str, Any]] = {}
        for layout in order:
            got[layout] = await _one_layout(client, cfg, layout)
            f = got[layout]
            echo(f"round {i + 1}/{cfg.rounds} {layout:<6} ({f['keys']} key(s)): {f['messages_per_s']:,.1f} msg/s "
                 f"in {f['seconds']} s, {f['messages_per_poll']} msg/poll; "
                 f"lost/dup/reord {f['lost']}/{f['duplicates']}/{f['reordered']}")
        rounds.append(got)
    return {"bench": "hotkey", **summarize(rounds), "rounds": rounds, "config": asdict(cfg)}
