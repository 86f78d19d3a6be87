"""The PNG chart of a benchmark run (matplotlib, Agg backend: no display needed).

One panel per scenario that ran (produce throughput, latency, queues, consumers,
catch-up), each system a colour; a last panel lists the machine and the check totals.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vpq.load.report import check_totals

if TYPE_CHECKING:
    from matplotlib.axes import Axes

COLOURS = {"vpq": "#d62728", "redis": "#1f77b4", "nats": "#2ca02c", "nats-subjects": "#98df8a", "rabbitmq": "#ff7f0e"}


def _ok(per_system: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {n: r for n, r in per_system.items() if isinstance(r, Mapping) and r.get("status") != "error"}


def _bars(ax: Axes, groups: list[str], series: dict[str, list[float]], ylabel: str, log: bool = False) -> None:
    n = max(1, len(series))
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, values, width, label=name, color=COLOURS.get(name))
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=7)


def _panel_1(ax: Axes, res: Mapping[str, Any]) -> None:
    series = {n: [r.get(f"batch_{b}", {}).get("msgs_per_s", 0) for b in (1, 100)] for n, r in res.items()}
    _bars(ax, ["batch 1", "batch 100"], series, "msgs/s (durable)", log=True)
    ax.set_title("1. produce throughput")


def _panel_2(ax: Axes, res: Mapping[str, Any]) -> None:
    series = {n: [r.get("end_to_end", {}).get(k, 0) for k in ("p50_ms", "p99_ms")] for n, r in res.items()}
    _bars(ax, ["p50", "p99"], series, "end-to-end ms", log=True)
    ax.set_title("2. latency at a fixed rate")


def _panel_3(ax: Axes, res: Mapping[str, Any]) -> None:
    for n, r in res.items():
        steps = r.get("steps", [])
        ax.plot([s["queues"] for s in steps], [s.get("msgs_per_s", 0) for s in steps], "o-", label=n, color=COLOURS.get(n))
    ax.set_xscale("log")
    ax.set_xlabel("logical queues")
    ax.set_ylabel("msgs/s (batch 10)")
    ax.set_title("3. throughput vs queues")
    ax.legend(fontsize=7)


def _panel_4(ax: Axes, res: Mapping[str, Any]) -> None:
    ideal_drawn = False
    for n, r in res.items():
        for mode, style in (("ordered", "o-"), ("unordered", "x--")):
            steps = r.get(mode, [])
            xs = [s["consumers"] for s in steps]
            ax.plot(xs, [s.get("msgs_per_s", 0) for s in steps], style, label=f"{n} {mode}", color=COLOURS.get(n))
            if steps and not ideal_drawn:
                ax.plot(xs, [s.get("ideal_msgs_per_s", 0) for s in steps], ":", color="grey", label="ideal")
                ideal_drawn = True
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("consumers (10 ms work each)")
    ax.set_ylabel("msgs/s")
    ax.set_title("4. consumer scaling")
    ax.legend(fontsize=6)


def _panel_5(ax: Axes, res: Mapping[str, Any]) -> None:
    series = {n: [r.get("idle", {}).get("p99_ms", 0), r.get("catchup", {}).get("p99_ms", 0)] for n, r in res.items()}
    _bars(ax, ["idle", "during catch-up"], series, "producer p99 ms", log=True)
    ax.set_title("5. producer p99 vs catch-up read")


PANELS = {"1": _panel_1, "2": _panel_2, "3": _panel_3, "4": _panel_4, "5": _panel_5}


def write_chart(results: Mapping[str, Any], path: Path) -> Path:
    """Draw ``results`` (the harness's results dict) into ``path`` (PNG); answers ``path``."""
    import matplotlib  # imported on first use: the CLI imports this module for every command

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    flat = list(axes.flat)
    scenarios: Mapping[str, Any] = results.get("scenarios", {})
    for i, (number, draw) in enumerate(PANELS.items()):
        ax = flat[i]
        per_system = _ok((scenarios.get(number) or {}).get("systems", {}))
        if per_system:
            draw(ax, per_system)
        else:
            ax.set_title(f"{number}. not run")
            ax.axis("off")
    info = flat[5]
    info.axis("off")
    machine = results.get("machine", {})
    text = [f"mode: {results.get('mode', '?')}", f"cpus: {machine.get('cpus')}", f"memory: {machine.get('memory_gib')} GiB"]
    for name, system in results.get("systems", {}).items():
        status = "measured" if system.get("available") else f"skipped: {system.get('reason', '')[:60]}"
        text.append(f"{name}: {status}")
    totals = check_totals(scenarios)
    text.append(
        f"checks: {totals['checks']} run, {totals['failed']} failed "
        f"(lost {totals['lost']}, dup {totals['duplicates']}, reordered {totals['reordered']})"
    )
    info.text(0.0, 1.0, "\n".join(text), va="top", family="monospace", fontsize=8)
    fig.suptitle(f"vpq bench peers, {results.get('started_at', '')}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
