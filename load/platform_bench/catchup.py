"""``vpq bench catchup``: one consumer catching up on a backlog, vpq against Redis Streams.

Both systems are driven through the harness's :class:`load.system.System` drivers, so
each does what the peers benchmark does: vpq through its SDK (:mod:`load.peers.vpq`:
one :class:`sdk.consumer.Consumer`, acks after each poll), Redis Streams with redis-py
(hiredis parser when installed) ``XREADGROUP COUNT <batch>`` then ``XACK`` of the batch
(:mod:`load.peers.redis_streams`, its own ``redis-server`` with ``appendfsync always``,
started the way the peers harness starts it).

One round, per system: a fresh ordered queue (one stream for Redis); a backlog of
``backlog`` payloads of ``message_bytes`` over ``keys`` keys, produced completely with
per-key order (:func:`load.platform_bench.backlog.produce_ordered`); then ONE member
consumes with fetches of ``batch`` until every message was handled once. The rate is
messages / (first delivery of the last message - the moment the member started, vpq's
after its join).
Rounds alternate which system goes first. Figures: per system the median msg/s,
``ratio`` = median vpq / median redis (the goal is at least 1.0), each round's ratio,
and CPU per message: the platform's CPU seconds per role during vpq's catch-up
(``cpu_us_per_message``, :func:`load.platform_bench.proc_cpu.cpu_by_role`), the
redis-server's, and this process's (the consumer's) for each; and vpq's messages per
poll (:mod:`load.platform_bench.poll_counts`). Every delivery is
checked (lost, duplicates, reordered, unexpected); a catch-up that does not end within
``timeout_s`` counts its missing messages as lost.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from vpq.load.checks import DeliveryChecker
from vpq.load.payload import parse_payload
from vpq.load.peers.redis_streams import RedisStreams
from vpq.load.peers.vpq import Vpq
from vpq.load.platform_bench.backlog import produce_ordered
from vpq.load.platform_bench.measure import median, median_or_none
from vpq.load.platform_bench.poll_counts import messages_per_poll, poll_counts
from vpq.load.platform_bench.proc_cpu import own_cpu_seconds
from vpq.load.system import System
from vpq.sdk.client import AsyncClient

Echo = Callable[[str], None]
CpuSampler = Callable[[], dict[str, float]]
PollSampler = Callable[[], Awaitable["tuple[int, int] | None"]]
SYSTEMS = ("vpq", "redis")
COUNTS = ("lost", "duplicates", "reordered", "unexpected")


@dataclass(frozen=True)
class CatchupConfig:
    backlog: int = 50_000
    keys: int = 100
    message_bytes: int = 1024
    batch: int = 500
    rounds: int = 3
    timeout_s: float = 120.0
    produce_batch: int = 500

    def __post_init__(self) -> None:
        if self.backlog < 1 or self.keys < 1 or self.rounds < 1:
            raise ValueError("backlog, keys and rounds must be >= 1")
        if not 1 <= self.batch <= 1000:
            raise ValueError("batch must be within 1..1000")
        if self.message_bytes < 32 or self.timeout_s <= 0:
            raise ValueError("message_bytes must be >= 32 and timeout_s > 0")

    @classmethod
    def quick(cls) -> CatchupConfig:
        """A form that runs in seconds (tests, smoke checks)."""
        return cls(backlog=5_000, rounds=1, timeout_s=60.0)


def _process_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0
    return t.user + t.system


def per_message_us(before: dict[str, float], after: dict[str, float], messages: int) -> dict[str, float]:
    """CPU microseconds per message per role between two samples (roles in both). Pure."""
    if messages <= 0:
        return {}
    return {r: round((after[r] - before[r]) * 1e6 / messages, 1) for r in sorted(after) if r in before}


async def _no_polls() -> None:
    return None


async def catch_up_once(
    system: System, cfg: CatchupConfig, queue: str, cpu: CpuSampler, polls: PollSampler = _no_polls
) -> dict[str, Any]:
    """One system's part of a round (see the module docstring); ``polls`` samples the
    gateway's poll counters (:mod:`load.platform_bench.poll_counts`) for vpq."""
    checker = DeliveryChecker(order_required=True)
    await system.setup([queue], ordered=True, shards=1)
    try:
        async def send(pairs: Sequence[tuple[str, bytes]]) -> None:
            await system.produce(queue, pairs)

        produce_rate = await produce_ordered(send, cfg.backlog, cfg.keys, message_bytes=cfg.message_bytes,
                                             batch=cfg.produce_batch, workers=4, on_acked=checker.expect)
        done = asyncio.Event()
        last = [0.0]

        async def handle(key: str, payload: bytes) -> None:
            stamp = parse_payload(payload)
            if checker.observe(stamp.key, stamp.seq):
                last[0] = time.monotonic()
                if checker.expected_seen >= cfg.backlog:
                    done.set()

        polls_before = await polls()
        cpu_before, own_before = cpu(), own_cpu_seconds()
        member = await system.consume(queue, handle, ordered=True, batch=cfg.batch)
        started = time.monotonic()  # vpq's member has joined by now; Redis's has no join
        timed_out = False
        try:
            await asyncio.wait_for(done.wait(), cfg.timeout_s)
        except TimeoutError:
            timed_out = True
        cpu_after, own_after = cpu(), own_cpu_seconds()
        per_poll = messages_per_poll(polls_before, await polls())
        await member.stop()
    finally:
        await system.delete([queue])
    report = checker.report()
    seen = report.expected - report.lost
    seconds = (last[0] - started) if last[0] > 0 else time.monotonic() - started
    cpu_us = per_message_us(cpu_before, cpu_after, seen)
    cpu_us["consumer"] = round((own_after - own_before) * 1e6 / seen, 1) if seen else 0.0
    return {
        "messages_per_s": round(seen / seconds, 1) if seconds > 0 else 0.0,
        "seconds": round(seconds, 3),
        "produce_per_s": round(produce_rate, 1),
        "cpu_us_per_message": cpu_us,
        "messages_per_poll": per_poll,
        "timed_out": timed_out,
        **{c: getattr(report, c) for c in COUNTS},
    }


def summarize(rounds: Sequence[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Medians per system, ratio of medians, each round's ratio, median CPU per message
    per role and the summed counts of ``rounds`` (each ``{"vpq": ..., "redis": ...}``). Pure."""
    rate = {s: median([r[s]["messages_per_s"] for r in rounds]) for s in SYSTEMS}
    cpu: dict[str, dict[str, float]] = {}
    for s in SYSTEMS:
        roles = set().union(*(r[s]["cpu_us_per_message"].keys() for r in rounds))
        cpu[s] = {role: round(median([r[s]["cpu_us_per_message"][role] for r in rounds
                                      if role in r[s]["cpu_us_per_message"]]), 1) for role in sorted(roles)}
    return {
        "vpq_per_s": round(rate["vpq"], 1),
        "redis_per_s": round(rate["redis"], 1),
        "ratio": round(rate["vpq"] / rate["redis"], 4) if rate["redis"] else 0.0,
        "ratio_per_round": [round(r["vpq"]["messages_per_s"] / r["redis"]["messages_per_s"], 4)
                            if r["redis"]["messages_per_s"] else 0.0 for r in rounds],
        "cpu_us_per_message": cpu,
        "vpq_messages_per_poll": median_or_none([r["vpq"].get("messages_per_poll") for r in rounds]),
        "timed_out": any(r[s]["timed_out"] for r in rounds for s in SYSTEMS),
        **{c: sum(r[s][c] for r in rounds for s in SYSTEMS) for c in COUNTS},
    }


async def run_catchup(
    url: str,
    cfg: CatchupConfig,
    echo: Echo = lambda _: None,
    platform_cpu: CpuSampler | None = None,
    data_root: Path | None = None,
) -> dict[str, Any]:
    """Run the benchmark against the vpq gateway at ``url`` and a Redis started here;
    ``platform_cpu`` samples vpq's CPU seconds per role. Answers the figures."""
    work = Path(tempfile.mkdtemp(prefix="vpq-bench-catchup-", dir=data_root))
    vpq = Vpq(url, start_if_missing=False)
    redis = RedisStreams(data_dir=work / "redis")
    (work / "redis").mkdir(parents=True, exist_ok=True)
    rounds: list[dict[str, dict[str, Any]]] = []
    metrics_client = AsyncClient(url, timeout=10.0)
    try:
        await vpq.start()
        await redis.start()
        samplers: dict[str, CpuSampler] = {
            "vpq": platform_cpu or (lambda: {}),
            "redis": lambda: {"redis": _process_cpu(redis.server_pid)},
        }
        drivers: dict[str, System] = {"vpq": vpq, "redis": redis}
        pollers: dict[str, PollSampler] = {"vpq": lambda: poll_counts(metrics_client), "redis": _no_polls}
        for i in range(cfg.rounds):
            order = SYSTEMS if i % 2 == 0 else SYSTEMS[::-1]
            got: dict[str, dict[str, Any]] = {}
            for name in order:
                got[name] = f = await catch_up_once(drivers[name], cfg, f"catchup-{i}", samplers[name],
                                                    pollers[name])
                per_poll = f"{f['messages_per_poll']} msg/poll; " if f.get("messages_per_poll") else ""
                echo(f"round {i + 1}/{cfg.rounds} {name:<5}: {f['messages_per_s']:,.1f} msg/s in {f['seconds']} s; "
                     f"{per_poll}"
                     f"CPU us/msg {f['cpu_us_per_message']}; lost/dup/reord {f['lost']}/{f['duplicates']}/"
                     f"{f['reordered']}")
            rounds.append(got)
        redis_info = redis.describe()
    finally:
        await metrics_client.close()
        await redis.stop()
        await vpq.stop()
        shutil.rmtree(work, ignore_errors=True)
    return {"bench": "catchup", **summarize(rounds), "redis": redis_info, "rounds": rounds, "config": asdict(cfg)}
