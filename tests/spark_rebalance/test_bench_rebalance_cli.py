"""``vpq bench rebalance`` shows its steps on stderr; stdout keeps the figures and ends
with the JSON line."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from vpq.cli.main import app


def test_bench_rebalance_progress_on_stderr_json_last_on_stdout() -> None:
    result = CliRunner().invoke(
        app, ["bench", "rebalance", "--rows", "320", "--vps", "32", "--pps", "2", "--repeat", "2", "--master", "local[1]"]
    )
    assert result.exit_code == 0, result.output
    last = json.loads(result.stdout.strip().splitlines()[-1])
    assert last["vps"] == 32 and last["rows"] == 320 and last["job_total_s_best"] > 0
    done = [line.split("  ")[0] for line in result.stderr.splitlines() if line.startswith("✓ ")]
    assert done[0] == "✓ writing 320 rows of synthetic statistics" and done[1] == "✓ starting Spark (local[1])"
    assert "✓ job run 1/2: read + aggregate + EMA + plan" in done and done[-2:] == [
        "✓ job run 2/2: read + aggregate + EMA + plan", "✓ stopping Spark"
    ]
    assert "✓ " not in result.stdout and "job end to end" in result.stdout
