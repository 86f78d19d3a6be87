"""Plan rendering: the rich tables and the before/after PNG chart."""

from __future__ import annotations

import struct

from rich.console import Console

from spark_rebalance.plan_model import Plan, PlannerOptions
from spark_rebalance.planner import plan
from spark_rebalance.report import chart_path, render_plan, write_chart
from spark_rebalance.synthetic import placement_for, queue_sizes, single_heavy_loads

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
