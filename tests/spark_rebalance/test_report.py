"""Plan rendering: the rich tables, the before/after PNG chart, the ``vpq rebalance`` report."""

from __future__ import annotations

import json
import struct

from rich.console import Console

from vpq.cli.rebalance_report import print_outcome
from vpq.config.settings import RebalanceSettings
from vpq.spark_rebalance.plan_model import Plan, PlannerOptions
from vpq.spark_rebalance.planner import plan
from vpq.spark_rebalance.report import chart_path, render_plan, write_chart
from vpq.spark_rebalance.runner import RebalanceOutcome
from vpq.spark_rebalance.synthetic import placement_for, queue_sizes, single_heavy_loads

PPS = list(range(4))


def _plan() -> Plan:
    loads = single_heavy_loads(8, 4, heavy_share=0.3)
    return plan(placement_for(queue_sizes(loads), PPS), loads, PPS, PlannerOptions())


def test_render_shows_summary_moves_and_loads() -> None:
    p = _plan()
    console = Console(record=True, width=200)
    render_plan(p, console, max_moves_shown=2, target=1.1)
    text = console.export_text()
    assert f"after: combined {p.imbalance_after.combined:.3f}" in text
    assert f"moves: {len(p.moves)} made, lower bound {p.moves_min}" in text
    assert f"split {p.splits[0].queue}: V {p.splits[0].from_vps} -> {p.splits[0].to_vps}" in text
    assert f"... {len(p.moves) - 2} more" in text
    assert "per-partition load" in text
    for pp in PPS:
        assert any(line.strip().lstrip("│┃ ").startswith(f"{pp} ") for line in text.splitlines())


def test_render_fits_80_columns() -> None:
    p = _plan()
    console = Console(record=True, width=80)
    render_plan(p, console, max_moves_shown=5, target=1.1)
    lines = console.export_text().splitlines()
    assert all(len(line) <= 80 for line in lines)
    header = next(line for line in lines if "bytes/s" in line)
    assert all(col in header for col in ("pp", "vps", "bytes/s", "msgs/s", " x "))  # not folded into letters
    rows = [line for line in lines if " → " in line and "load" not in line]
    assert len(rows) == len(PPS)


def test_render_refused_plan() -> None:
    console = Console(record=True, width=120)
    render_plan(Plan.refusal(placement_for({"a": 2}, PPS), 4, "statistics are stale"), console)
    assert console.export_text().strip() == "rebalance refused: statistics are stale"


def test_chart_is_a_png_under_the_data_dir(tmp_path) -> None:
    path = chart_path(tmp_path, 1234)
    assert path == tmp_path / "rebalance" / "plan-1234.png"
    out = write_chart(_plan(), path, target=1.1)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 600 and height >= 600
    assert [p.name for p in path.parent.iterdir()] == ["plan-1234.png"]


def test_print_outcome_for_vpq_rebalance(tmp_path) -> None:
    console = Console(record=True, width=200)
    chart = print_outcome(RebalanceOutcome(_plan(), None, 1500.0, 20.0), console, tmp_path, 99, RebalanceSettings(), True)
    assert chart == tmp_path / "rebalance" / "plan-99.png" and chart.is_file()
    lines = console.export_text().splitlines()
    assert lines[0].startswith("dry run")
    last = json.loads(lines[-1])
    assert last["dry_run"] is True and last["chart"] == str(chart) and "placement" not in last
    assert last["moves_made"] == len(last["moves"]) > 0

    refused = Plan.refusal(placement_for({"a": 2}, PPS), 4, "statistics are stale")
    console = Console(record=True, width=200)
    assert print_outcome(RebalanceOutcome(refused, None, 5.0, 0.0), console, tmp_path, 100, RebalanceSettings(), False) is None
    assert json.loads(console.export_text().splitlines()[-1])["refused"] == "statistics are stale"
    assert not (tmp_path / "rebalance" / "plan-100.png").exists()
