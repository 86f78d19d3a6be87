"""``vpq bench ceiling``: the pure summary, and short real runs (stand-ins and Redis)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.needs import needs_redis_binary
from vpq.cli.main import app
from vpq.load.ceiling import CeilingConfig, Round, parse_systems, report_lines, run_ceiling, summarise


def _round(system: str, i: int, rate: float, **servers: float) -> Round:
    return Round(system, i, int(rate), 1.0, 0, rate, 4.0 + i, dict(servers))


def test_summary_takes_medians_and_the_ratios() -> None:
    rounds = [
        _round("null-2hop", 0, 200_000, gateway=2.0, node=1.0),
        _round("null-2hop", 1, 240_000, gateway=2.2, node=0.8),
        _round("null-2hop", 2, 220_000, gateway=2.4, node=0.9),
        _round("redis", 0, 50_000, server=6.0),
        _round("redis", 1, 60_000, server=5.0),
        _round("redis", 2, 55_000, server=5.5),
        _round("vpq", 0, 80_000),
        _round("vpq", 1, 90_000),
        _round("vpq", 2, 85_000),
    ]
    s = summarise(rounds)
    assert s["systems"]["null-2hop"]["msgs_per_s"] == 220_000
    assert s["systems"]["null-2hop"]["server_us_per_msg"] == {"gateway": 2.2, "node": 0.9}
    assert s["systems"]["redis"]["round_msgs_per_s"] == [50_000, 60_000, 55_000]
    assert s["systems"]["vpq"]["client_us_per_msg"] == 5.0
    assert s["target_msgs_per_s"] == 165_000
    assert s["null_2hop_vs_target"] == round(220_000 / 165_000, 3)
    assert s["vpq_vs_redis"] == round(85_000 / 55_000, 3)
    assert s["vpq_vs_null_2hop"] == round(85_000 / 220_000, 3)
    assert s["vpq_vs_target"] == round(85_000 / 165_000, 3)
    assert any("3 x Redis = 165,000" in line for line in report_lines(s))


def test_summary_without_redis_has_no_target() -> None:
    s = summarise([_round("null-1hop", 0, 100_000, gateway=1.0)])
    assert s["target_msgs_per_s"] is None and s["null_2hop_vs_target"] is None and s["vpq_vs_redis"] is None
    assert "n/a" in report_lines(s)[-1]


def test_parse_systems() -> None:
    assert parse_systems("redis, null-2hop,redis") == ("redis", "null-2hop")
    with pytest.raises(ValueError, match="nats"):
        parse_systems("nats")
    with pytest.raises(ValueError):
        parse_systems(" , ")


async def test_a_short_run_of_the_stand_ins_measures_both_hops(tmp_path: Path) -> None:
    cfg = CeilingConfig(systems=("null-1hop", "null-2hop"), rounds=2, seconds=0.3, producers=4, data_dir=tmp_path)
    lines: list[str] = []
    result = await run_ceiling(cfg, echo=lines.append)
    assert result["skipped"] == {}
    assert [(r["system"], r["round"]) for r in result["rounds"]] == [
        ("null-1hop", 0), ("null-2hop", 0), ("null-1hop", 1), ("null-2hop", 1)
    ]
    for r in result["rounds"]:
        assert r["errors"] == 0 and r["messages"] > 0 and r["client_us_per_msg"] > 0
    two = result["summary"]["systems"]["null-2hop"]["server_us_per_msg"]
    assert set(two) == {"gateway", "node"} and two["gateway"] > 0 and two["node"] > 0
    assert sum("round" in line for line in lines) == 4


@needs_redis_binary
def test_cli_with_redis_writes_results_and_ends_with_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["bench", "ceiling", "--systems", "null-2hop,redis", "--rounds", "1", "--seconds", "0.3",
         "--producers", "2", "--data-dir", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    last = json.loads(result.output.strip().splitlines()[-1])
    assert last["bench"] == "ceiling" and last["skipped"] == {}
    assert last["systems"]["redis"]["msgs_per_s"] > 0 and last["target_msgs_per_s"] > 0
    assert last["systems"]["redis"]["server_us_per_msg"]["server"] > 0
    files = list(tmp_path.glob("ceiling-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["summary"] == {k: v for k, v in last.items() if k not in ("bench", "skipped")}


def test_cli_refuses_an_unknown_system() -> None:
    result = CliRunner().invoke(app, ["bench", "ceiling", "--systems", "kafka"])
    assert result.exit_code == 2 and "kafka" in result.output


@needs_redis_binary
async def test_a_short_run_of_vpq_splits_its_cpu_by_role(tmp_path: Path) -> None:
    cfg = CeilingConfig(systems=("vpq",), rounds=1, seconds=0.3, producers=2, data_dir=tmp_path)
    result = await run_ceiling(cfg, echo=lambda _line: None)
    assert result["skipped"] == {}
    (r,) = result["rounds"]
    assert r["errors"] == 0 and r["messages"] > 0
    assert r["server_us_per_msg"]["gateway"] > 0 and r["server_us_per_msg"]["write_nodes"] > 0
