"""``vpq bench assign``: speed and stickiness of the vp -> consumer assignment.

Times (median of ``--repeat`` runs) a fresh assignment of ``--vps`` vps to
``--consumers`` consumers spread over ``--contexts`` isolation contexts, a join of
one consumer, a leave of one consumer, and an automatic split (twice as many
consumers as vps in one context). Prints one line per figure, then one JSON line.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import TypeVar

import typer

from vpq.isolation.context import IsolationContext
from vpq.virtual_partitions.assignment import AssignmentResult, assign

T = TypeVar("T")


def _timed(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """Median wall time in ms over ``repeat`` runs, and the last result."""
    times: list[float] = []
    t0 = time.perf_counter()
    result = fn()
    times.append((time.perf_counter() - t0) * 1000.0)
    for _ in range(repeat - 1):
        t0 = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times), result


def run_bench(vps: int, consumers: int, contexts: int, repeat: int) -> dict[str, float | int]:
    """Run the benchmark and return its figures (also used by ``bench_assign``)."""
    ctxs = [IsolationContext(lane="" if i == 0 else f"lane-{i}") for i in range(contexts)]
    members = {f"consumer-{i:05d}": ctxs[i % contexts] for i in range(consumers)}
    assign_ms, base = _timed(lambda: assign(members, vps), repeat)

    joined = {**members, "joiner": ctxs[0]}
    join_ms, after_join = _timed(lambda: assign(joined, vps, previous=base), repeat)

    leaver = next(iter(members))
    left = {c: x for c, x in members.items() if c != leaver}
    leave_ms, after_leave = _timed(lambda: assign(left, vps, previous=base), repeat)

    small_v = max(1, vps // 8)
    crowd = {f"c{i:05d}": ctxs[0] for i in range(2 * small_v)}
    prev_small: AssignmentResult[IsolationContext] = assign(dict(list(crowd.items())[: small_v // 2 or 1]), small_v)
    split_ms, split = _timed(lambda: assign(crowd, small_v, previous=prev_small), repeat)

    return {
        "vps": base.virtual_partitions,
        "consumers": consumers,
        "contexts": contexts,
        "repeat": repeat,
        "assign_ms_median": round(assign_ms, 3),
        "join_ms_median": round(join_ms, 3),
        "moved_on_join": after_join.moved,
        "leave_ms_median": round(leave_ms, 3),
        "moved_on_leave": after_leave.moved,
        "split_ms_median": round(split_ms, 3),
        "split_from_vps": split.grew_from,
        "split_to_vps": split.virtual_partitions,
        "moved_on_split": split.moved,
    }


def bench_assign(
    vps: int = typer.Option(4096, help="virtual partitions of the queue (power of two)"),
    consumers: int = typer.Option(1000, min=1, help="live consumers of the group"),
    contexts: int = typer.Option(1, min=1, help="isolation contexts the consumers are spread over"),
    repeat: int = typer.Option(7, min=1, help="repetitions per figure (the median is reported)"),
) -> None:
    """Time assigning vps to consumers (fresh, join, leave, automatic split)."""
    try:
        r = run_bench(vps, consumers, contexts, repeat)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    typer.echo(f"assign {r['vps']} vps to {consumers} consumers in {contexts} context(s): {r['assign_ms_median']} ms")
    typer.echo(f"join one consumer:  {r['join_ms_median']} ms, moved {r['moved_on_join']} vps")
    typer.echo(f"leave one consumer: {r['leave_ms_median']} ms, moved {r['moved_on_leave']} vps")
    typer.echo(
        f"automatic split {r['split_from_vps']} -> {r['split_to_vps']} vps: "
        f"{r['split_ms_median']} ms, moved {r['moved_on_split']} vps"
    )
    typer.echo(json.dumps(r))
