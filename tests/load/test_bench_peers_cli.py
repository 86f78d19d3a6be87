"""``vpq bench peers`` argument handling (the run itself is covered by test_harness)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from vpq.cli.main import app

runner = CliRunner()


def test_unknown_system_or_scenario_is_a_usage_error() -> None:
    result = runner.invoke(app, ["bench", "peers", "--systems", "kafka"])
    assert result.exit_code == 2 and "kafka" in result.output
    result = runner.invoke(app, ["bench", "peers", "--scenarios", "9"])
    assert result.exit_code == 2 and "scenarios" in result.output


def test_an_unreachable_vpq_is_skipped_and_the_last_line_is_json(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["bench", "peers", "--quick", "--systems", "vpq", "--scenarios", "2", "--vpq-url", "http://127.0.0.1:9",
         "--no-start-vpq", "--data-dir", str(tmp_path)],
    )
    assert result.exit_code == 0, result.output
    last = json.loads(result.output.strip().splitlines()[-1])
    assert last["systems"] == {"vpq": "skipped"} and last["mode"] == "quick"
    assert Path(last["results"]).exists() and Path(last["chart"]).exists()
