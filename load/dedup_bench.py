"""``vpq bench dedup``: produce throughput with a ``dedup_id`` on every message against
without, on one vpq platform.

One ``vpq up`` (8 physical partitions, fsync per group commit) is started; two SDK
drivers (:mod:`load.peers.vpq`) share it: ``dedup`` (the SDK's default: every message
carries a ``dedup_id``, so the write node checks and indexes each one) and ``plain``
(``AsyncClient(dedup=False)``: no ids, nothing checked). Each round runs both, closed
loop, ``producers`` tasks, batches of ``batch`` 1 KiB keyed messages
(:func:`load.ceiling.measure`, scenario 1's shape), on a queue of its own; the order
alternates from round to round so the shared machine's drift touches both. A figure is
the median of its rounds; ``ratio`` is ``dedup / plain`` (the goal: at least 0.8).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from vpq.common.redis_server import free_port
from vpq.load.ceiling import CeilingConfig, Round, measure
from vpq.load.peers.vpq import Vpq

GOAL_RATIO = 0.8


class _SharedVpq(Vpq):
    """A driver of the platform ``owner`` started (its server CPU is the owner's)."""

    def __init__(self, owner: Vpq, **kwargs: Any) -> None:
        super().__init__(owner.describe()["url"], start_if_missing=False, **kwargs)
        self._owner = owner

    @property
    def server_pid(self) -> int | None:
        return self._owner.server_pid


def summarise(rounds: list[Round]) -> dict[str, Any]:
    """Median rate per variant and the ratio dedup / plain. Pure."""
    out: dict[str, Any] = {}
    for name in ("dedup", "plain"):
        rates = [r.msgs_per_s for r in rounds if r.system == name]
        out[name] = {
            "msgs_per_s": round(statistics.median(rates), 1) if rates else None,
            "round_msgs_per_s": rates,
            "errors": sum(r.errors for r in rounds if r.system == name),
        }
    a, b = out["dedup"]["msgs_per_s"], out["plain"]["msgs_per_s"]
    out["ratio"] = round(a / b, 3) if a and b else None
    out["goal"] = GOAL_RATIO
    out["met"] = out["ratio"] is not None and out["ratio"] >= GOAL_RATIO
    return out


async def run_dedup_bench(cfg: CeilingConfig, echo: Callable[[str], None] = print) -> dict[str, Any]:
    tag = time.strftime("%Y%m%d%H%M%S")
    owner = Vpq(f"http://127.0.0.1:{free_port()}", data_dir=cfg.data_dir / "work" / f"vpq-dedup-{tag}", tag=f"d{tag}")
    rounds: list[Round] = []
    started = time.monotonic()
    await owner.start()
    plain = _SharedVpq(owner, tag=f"p{tag}", dedup=False)
    try:
        await plain.start()
        echo(f"platform: {owner.describe()}")
        variants = {"dedup": owner, "plain": plain}
        for i in range(cfg.rounds):
            order = ["dedup", "plain"] if i % 2 == 0 else ["plain", "dedup"]
            for name in order:
                r = await measure(variants[name], name, cfg, i)
                rounds.append(r)
                servers = ", ".join(f"{role} {us:.1f}" for role, us in r.server_us_per_msg.items() if us > 0)
                errors = f"; {r.errors} failed requests ({r.first_error})" if r.errors else ""
                echo(
                    f"  round {i + 1} {name:<6} {r.msgs_per_s:>10,.0f} msg/s  CPU per message (us): "
                    f"client {r.client_us_per_msg:.1f}, {servers}{errors}"
                )
    finally:
        await plain.stop()
        await owner.stop()
    return {
        "bench": "dedup",
        "config": {**asdict(cfg), "data_dir": str(cfg.data_dir), "systems": ["dedup", "plain"]},
        "elapsed_s": round(time.monotonic() - started, 1),
        "rounds": [asdict(r) for r in rounds],
        "summary": summarise(rounds),
    }
