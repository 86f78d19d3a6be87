"""Presenting a ``Plan``: rich tables for the terminal, a PNG chart for the record.

- ``render_plan(plan, console)``: summary (imbalance before/after for bytes,
  msgs and combined; moves made vs the lower bound; splits; proposed partition
  count; reasons), the moves (first ``max_moves_shown``), and per-partition
  load before and after.
- ``write_chart(plan, path)``: bar chart, before vs after per partition, one
  panel for bytes/s and one for msgs/s, with the mean and the target lines.
  Uses matplotlib's Agg backend (no display needed). Writes atomically.
- ``chart_path(data_dir, now_ms)``: where charts go by default
  (``<data_dir>/rebalance/plan-<now_ms>.png``).
"""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console
from rich.table import Table

from vpq.spark_rebalance.plan_model import PartitionLoad, Plan

CHART_SUBDIR = "rebalance"


def _pyplot():  # noqa: ANN202 - matplotlib.pyplot
    """matplotlib with the Agg backend, imported on first use (it costs ~0.2 s, and the
    CLI imports this module for every command)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _rate(v: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.2f}{unit}"
    return f"{v:.1f}"


def chart_path(data_dir: str | Path, now_ms: int) -> Path:
    return Path(data_dir) / CHART_SUBDIR / f"plan-{now_ms}.png"


def render_plan(plan: Plan, console: Console, max_moves_shown: int = 20, target: float | None = None) -> None:
    """Print the plan (see the module docstring)."""
    if plan.refused:
        console.print(f"[bold red]rebalance refused[/]: {plan.refused}")
        return
    ib, ia = plan.imbalance_before, plan.imbalance_after
    console.print(
        f"imbalance (max/mean) before: combined {ib.combined:.3f} (bytes {ib.bytes:.3f}, msgs {ib.msgs:.3f})"
        f"  after: combined {ia.combined:.3f} (bytes {ia.bytes:.3f}, msgs {ia.msgs:.3f})"
        + (f"  target {target:.2f}" if target is not None else "")
    )
    console.print(
        f"moves: {len(plan.moves)} made, lower bound {plan.moves_min}"
        + (f" ({plan.forced_moves} forced)" if plan.forced_moves else "")
        + f"; splits: {len(plan.splits)}; partitions: {plan.partitions}"
        + (f" (proposed {plan.proposed_partitions})" if plan.proposed_partitions != plan.partitions else "")
    )
    for s in plan.splits:
        console.print(f"  split {s.queue}: V {s.from_vps} -> {s.to_vps}")
    for r in plan.reasons:
        console.print(f"  - {r}")
    if plan.moves:
        moves = Table(title=f"moves ({len(plan.moves)})")
        for col in ("queue", "vp", "from pp", "to pp"):
            moves.add_column(col, justify="right" if col != "queue" else "left")
        for m in plan.moves[:max_moves_shown]:
            moves.add_row(m.queue, str(m.vp), str(m.from_pp), str(m.to_pp))
        if len(plan.moves) > max_moves_shown:
            moves.add_row(f"... {len(plan.moves) - max_moves_shown} more", "", "", "")
        console.print(moves)
    console.print(_load_table(plan))


def _load_table(plan: Plan) -> Table:
    before = {p.pp: p for p in plan.before}
    after = {p.pp: p for p in plan.after}
    live = [p for p in plan.after if p.live] or [p for p in plan.before if p.live]
    n = max(len(live), 1)
    mean_b = sum(p.bytes_per_s for p in live) / n
    mean_m = sum(p.msgs_per_s for p in live) / n
    t = Table(title="per-partition load, before → after", caption="x: max of bytes/s and msgs/s over the mean",
              caption_justify="right")
    for col in ("pp", "vps", "bytes/s", "msgs/s", "x"):
        t.add_column(col, justify="right", no_wrap=True)

    def x(p: PartitionLoad | None) -> str:
        if p is None:
            return "-"
        xb = p.bytes_per_s / mean_b if mean_b > 0 else 0.0
        xm = p.msgs_per_s / mean_m if mean_m > 0 else 0.0
        return f"{max(xb, xm):.3f}"

    def pair(b: str, a: str) -> str:
        return f"{b} → {a}"

    for pp in sorted(set(before) | set(after)):
        b, a = before.get(pp), after.get(pp)
        label = str(pp) if (a or b) is None or (a or b).live else f"{pp} (gone)"
        t.add_row(
            label,
            pair(str(b.vps) if b else "-", str(a.vps) if a else "-"),
            pair(_rate(b.bytes_per_s) if b else "-", _rate(a.bytes_per_s) if a else "-"),
            pair(_rate(b.msgs_per_s) if b else "-", _rate(a.msgs_per_s) if a else "-"),
            pair(x(b), x(a)),
        )
    return t


def write_chart(plan: Plan, path: str | Path, target: float | None = None) -> Path:
    """Write the before/after bar chart as PNG to ``path`` (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pps = sorted({p.pp for p in plan.before} | {p.pp for p in plan.after})
    before = {p.pp: p for p in plan.before}
    after = {p.pp: p for p in plan.after}
    xs = list(range(len(pps)))
    plt = _pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, 0.5 * len(pps) + 3.0), 7.0), sharex=True)
    try:
        for ax, attr, label in ((axes[0], "bytes_per_s", "bytes/s"), (axes[1], "msgs_per_s", "msgs/s")):
            vb = [getattr(before[pp], attr) if pp in before else 0.0 for pp in pps]
            va = [getattr(after[pp], attr) if pp in after else 0.0 for pp in pps]
            ax.bar([x - 0.2 for x in xs], vb, width=0.4, label="before", color="#c0504d")
            ax.bar([x + 0.2 for x in xs], va, width=0.4, label="after", color="#4f81bd")
            live_after = [getattr(p, attr) for p in plan.after if p.live]
            if live_after:
                mean = sum(live_after) / len(live_after)
                ax.axhline(mean, color="black", linewidth=0.8, linestyle="--", label="mean")
                if target is not None:
                    ax.axhline(mean * target, color="gray", linewidth=0.8, linestyle=":", label=f"target x{target:.2f}")
            ax.set_ylabel(label)
            ax.legend(loc="upper right", fontsize="small")
        axes[1].set_xticks(xs)
        axes[1].set_xticklabels([str(pp) for pp in pps])
        axes[1].set_xlabel("physical partition")
        ib, ia = plan.imbalance_before.combined, plan.imbalance_after.combined
        fig.suptitle(f"vpq rebalance: max/mean {ib:.3f} -> {ia:.3f}, {len(plan.moves)} moves, {len(plan.splits)} splits")
        fig.tight_layout()
        tmp = path.with_name(f".{path.name}.tmp")
        fig.savefig(tmp, format="png", dpi=100)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
    return path
