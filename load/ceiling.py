"""``vpq bench ceiling``: scenario 1 at batch 100 against the floor of vpq's own shape.

Scenario 1's goal asks vpq for 3x Redis Streams. This measures how much of that budget
the transport alone takes on this machine, with the same client (the SDK, closed loop,
``producers`` tasks, batches of ``batch`` 1 KiB messages, 4 keys per task:
:func:`load.scenarios.common.produce_closed`, as scenario 1 runs it):

* ``null-1hop``: the client against a gateway stand-in that reads the request and
  answers a produce answer without any work (:mod:`load.null_servers`);
* ``null-2hop``: the same stand-in handing every body on to a write-node stand-in (one
  request in flight, the rest joined into the next, as vpq's gateway does) before it
  answers: vpq's two HTTP hops with no decoding, routing, writing or fsync;
* ``redis``: the scenario 1 Redis Streams peer (own redis-server, AOF ``always``);
* ``vpq``: vpq itself (``vpq up`` on a free port, 8 physical partitions).

Each round runs every system once, one after the other (rounds alternate the systems so
the shared machine's drift touches them all); a system's figure is the median of its
rounds. Next to each rate, CPU per message: the client's, and each server process's
(for vpq per role), read from the kernel's counters before and after the run.

:func:`summarise` is pure: medians, the 3x Redis target, and the ratios
``null_2hop / target`` (can the floor reach the goal at all?) and ``vpq / null_2hop``
(how much of its floor vpq keeps).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from vpq.common.redis_server import free_port
from vpq.load.peers import registry
from vpq.load.peers.redis_streams import RedisStreams
from vpq.load.peers.vpq import Vpq
from vpq.load.platform_bench.proc_cpu import cpu_by_role
from vpq.load.scenarios.common import produce_closed
from vpq.load.system import System, SystemUnavailable
from vpq.sdk.client import AsyncClient

SYSTEM_NAMES: tuple[str, ...] = ("null-1hop", "null-2hop", "redis", "vpq")
GOAL_RATIO = 3.0
KEYS_PER_PRODUCER = 4
START_TIMEOUT_S = 20.0


class NullHttp:
    """The null gateway (and, with two hops, the null write node) as processes of their
    own, driven through the SDK like vpq (:mod:`load.peers.vpq`'s ``produce``)."""

    durability = "none: nothing is decoded, written or synced"

    def __init__(self, hops: int, batch: int) -> None:
        if hops not in (1, 2):
            raise ValueError("hops must be 1 or 2")
        self.hops = hops
        self.batch = batch
        self.name = f"null-{hops}hop"
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._client: AsyncClient | None = None

    async def _spawn(self, role: str, *args: str) -> int:
        port = free_port()
        self._procs[role] = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "vpq.load.null_servers", role, "--port", str(port), *args,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        await _wait_for_port(port, self._procs[role])
        return port

    async def start(self) -> None:
        forward: list[str] = []
        if self.hops == 2:
            node_port = await self._spawn("node")
            forward = ["--forward", f"http://127.0.0.1:{node_port}/append"]
        gateway_port = await self._spawn("gateway", "--batch", str(self.batch), *forward)
        self._client = AsyncClient(f"http://127.0.0.1:{gateway_port}", timeout=30.0, max_connections=512)

    async def stop(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
        for proc in self._procs.values():
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        self._procs.clear()

    def describe(self) -> dict[str, Any]:
        return {"hops": self.hops, "durability": self.durability}

    def server_pids(self) -> dict[str, int]:
        """Role ("gateway", "node") -> pid of the stand-ins now running."""
        return {role: proc.pid for role, proc in self._procs.items() if proc.returncode is None}

    async def setup(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None:
        """Nothing to create."""

    async def delete(self, queues: Sequence[str]) -> None:
        """Nothing to delete."""

    async def produce(self, queue: str, batch: Sequence[tuple[str, bytes]], *, lanes: int = 1) -> None:
        if self._client is None:
            raise SystemUnavailable(f"{self.name}: not started")
        await self._client.produce(queue, [{"key": k, "value": p.decode("ascii")} for k, p in batch])


async def _wait_for_port(port: int, proc: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if proc.returncode is not None:
            raise SystemUnavailable(f"a null server exited with {proc.returncode} before listening on {port}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() >= deadline:
                raise SystemUnavailable(f"a null server did not listen on {port} within {START_TIMEOUT_S:g}s") from None
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return


def _tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its descendants; 0 when gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def server_cpu(system: Any) -> dict[str, float]:
    """CPU seconds so far of the servers ``system`` runs, per role; empty for a server
    the harness did not start (its processes are not known)."""
    if isinstance(system, NullHttp):
        return {role: _tree_cpu(pid) for role, pid in system.server_pids().items()}
    pid = getattr(system, "server_pid", None)
    if pid is None:
        return {}
    if isinstance(system, Vpq):
        return cpu_by_role(pid)
    return {"server": _tree_cpu(pid)}


@dataclass(frozen=True)
class CeilingConfig:
    systems: tuple[str, ...] = SYSTEM_NAMES
    rounds: int = 3
    seconds: float = 3.0
    batch: int = 100
    producers: int = 16
    message_bytes: int = 1024
    data_dir: Path = Path(".vpq/bench")
    gateway_workers: int = 1


@dataclass
class Round:
    system: str
    round: int
    messages: int
    seconds: float
    errors: int
    msgs_per_s: float
    client_us_per_msg: float
    server_us_per_msg: dict[str, float] = field(default_factory=dict)
    first_error: str = ""


async def measure(system: Any, name: str, cfg: CeilingConfig, round_no: int) -> Round:
    """One closed-loop batch run of ``cfg.seconds`` on a queue of its own (deleted after)."""
    queue = f"ceiling-r{round_no}"
    await system.setup([queue], ordered=True, shards=1)
    before = server_cpu(system)
    run = await produce_closed(
        system,
        [queue],
        producers=cfg.producers,
        batch=cfg.batch,
        max_messages=10**9,
        duration_s=cfg.seconds,
        keys_per_producer=KEYS_PER_PRODUCER,
        message_bytes=cfg.message_bytes,
        key_tag=f"c{round_no}-",
    )
    after = server_cpu(system)
    await system.delete([queue])
    n = max(1, run.messages)
    return Round(
        system=name,
        round=round_no,
        messages=run.messages,
        seconds=round(run.seconds, 3),
        errors=run.errors,
        msgs_per_s=round(run.messages / run.seconds, 1) if run.seconds > 0 else 0.0,
        client_us_per_msg=round(run.client_cpu * run.seconds / n * 1e6, 2),
        server_us_per_msg={r: round((after[r] - before[r]) / n * 1e6, 2) for r in sorted(after) if r in before},
        first_error=run.first_error,
    )


def summarise(rounds: Sequence[Round]) -> dict[str, Any]:
    """Per system the median rate and CPU per message over its rounds; the 3x Redis
    target and the ratios (``None`` where a figure is missing). Pure."""
    by: dict[str, list[Round]] = {}
    for r in rounds:
        by.setdefault(r.system, []).append(r)
    systems: dict[str, dict[str, Any]] = {}
    for name, rs in by.items():
        roles = sorted({role for r in rs for role in r.server_us_per_msg})
        systems[name] = {
            "rounds": len(rs),
            "msgs_per_s": round(statistics.median(r.msgs_per_s for r in rs), 1),
            "round_msgs_per_s": [r.msgs_per_s for r in rs],
            "client_us_per_msg": round(statistics.median(r.client_us_per_msg for r in rs), 2),
            "server_us_per_msg": {
                role: round(statistics.median(r.server_us_per_msg[role] for r in rs if role in r.server_us_per_msg), 2)
                for role in roles
            },
            "errors": sum(r.errors for r in rs),
        }

    def rate(name: str) -> float | None:
        s = systems.get(name)
        return s["msgs_per_s"] if s and s["msgs_per_s"] > 0 else None

    def ratio(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a is not None and b else None

    redis, floor, vpq = rate("redis"), rate("null-2hop"), rate("vpq")
    target = round(GOAL_RATIO * redis, 1) if redis is not None else None
    return {
        "systems": systems,
        "target_msgs_per_s": target,
        "null_2hop_vs_target": ratio(floor, target),
        "vpq_vs_redis": ratio(vpq, redis),
        "vpq_vs_null_2hop": ratio(vpq, floor),
        "vpq_vs_target": ratio(vpq, target),
    }


def make(name: str, cfg: CeilingConfig, tag: str) -> Any:
    if name == "null-1hop":
        return NullHttp(1, cfg.batch)
    if name == "null-2hop":
        return NullHttp(2, cfg.batch)
    work = cfg.data_dir / "work"
    if name == "redis":
        return RedisStreams(data_dir=work / f"redis-ceiling-{tag}")
    if name == "vpq":
        # a URL nothing answers on: the driver starts its own platform
        return Vpq(
            f"http://127.0.0.1:{free_port()}",
            data_dir=work / f"vpq-ceiling-{tag}",
            tag=tag,
            gateway_workers=cfg.gateway_workers,
        )
    raise ValueError(f"unknown system {name!r}; choose from {', '.join(SYSTEM_NAMES)}")


def parse_systems(text: str) -> tuple[str, ...]:
    """``--systems`` of ``vpq bench ceiling`` (the harness's rules, this command's names)."""
    return tuple(registry.parse_systems(text, SYSTEM_NAMES, SYSTEM_NAMES))


def _line(r: Round) -> str:
    servers = ", ".join(f"{role} {us:.1f}" for role, us in r.server_us_per_msg.items() if us > 0)
    errors = f"; {r.errors} failed requests ({r.first_error})" if r.errors else ""
    return (
        f"  round {r.round + 1} {r.system:<10} {r.msgs_per_s:>10,.0f} msg/s  CPU per message (us): "
        f"client {r.client_us_per_msg:.1f}" + (f", {servers}" if servers else "") + errors
    )


async def run_ceiling(cfg: CeilingConfig, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Start the chosen systems, run ``cfg.rounds`` rounds, stop them; the results."""
    tag = time.strftime("%Y%m%d%H%M%S")
    systems: dict[str, System | Any] = {}
    skipped: dict[str, str] = {}
    rounds: list[Round] = []
    started = time.monotonic()
    try:
        for name in cfg.systems:
            system = make(name, cfg, tag)
            try:
                await system.start()
            except SystemUnavailable as exc:
                skipped[name] = str(exc)
                echo(f"{name}: skipped: {exc}")
                continue
            systems[name] = system
            echo(f"{name}: started")
        for i in range(cfg.rounds):
            for name, system in systems.items():
                r = await measure(system, name, cfg, i)
                rounds.append(r)
                echo(_line(r))
    finally:
        for system in systems.values():
            await system.stop()
    return {
        "bench": "ceiling",
        "config": {**asdict(cfg), "data_dir": str(cfg.data_dir), "systems": list(cfg.systems)},
        "skipped": skipped,
        "elapsed_s": round(time.monotonic() - started, 1),
        "rounds": [asdict(r) for r in rounds],
        "summary": summarise(rounds),
    }


def report_lines(summary: dict[str, Any]) -> list[str]:
    """The human summary of :func:`summarise`'s result."""
    out = [f"{'system':<10} {'median msg/s':>13}  CPU per message, median (us)"]
    for name, s in summary["systems"].items():
        servers = ", ".join(f"{role} {us:.1f}" for role, us in s["server_us_per_msg"].items() if us > 0)
        out.append(f"{name:<10} {s['msgs_per_s']:>13,.0f}  client {s['client_us_per_msg']:.1f}" + (f", {servers}" if servers else ""))

    def fmt(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    if summary["target_msgs_per_s"] is not None:
        out.append(f"goal: {GOAL_RATIO:g} x Redis = {summary['target_msgs_per_s']:,.0f} msg/s")
    out.append(
        f"null 2-hop floor / goal = {fmt(summary['null_2hop_vs_target'])};  vpq / Redis = {fmt(summary['vpq_vs_redis'])};"
        f"  vpq / its floor = {fmt(summary['vpq_vs_null_2hop'])};  vpq / goal = {fmt(summary['vpq_vs_target'])}"
    )
    return out
