"""Smoke tests of ``vpq bench produce|latency|drain`` against a real ``vpq up`` (tiny sizes:
they check that the commands run, print figures, end with one JSON line and find no
loss or reordering; the figures themselves are not judged here)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.load.platform_fixtures import last_json, platform_url  # noqa: F401  (a fixture)
from vpq.cli.main import app

runner = CliRunner()


def test_no_platform_at_url_is_exit_2_with_a_json_error() -> None:
    result = runner.invoke(app, ["bench", "produce", "--url", "http://127.0.0.1:9", "--seconds", "1"])
    assert result.exit_code == 2, result.output
    last = last_json(result.output)
    assert last["bench"] == "produce" and "127.0.0.1:9" in last["error"]


def test_bad_options_are_usage_errors() -> None:
    result = runner.invoke(app, ["bench", "drain", "--consumers", "0"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["bench", "latency", "--runs", "0", "--url", "http://127.0.0.1:9"])
    assert result.exit_code == 2


def test_produce_two_runs(platform_url: str) -> None:
    result = runner.invoke(
        app,
        ["bench", "produce", "--url", platform_url, "--seconds", "0.8", "--warmup", "0.2", "--batch", "10",
         "--in-flight", "2", "--runs", "2"],
    )
    assert result.exit_code == 0, result.output
    assert "messages/s" in result.output and "median of 2 runs" in result.output
    last = last_json(result.output)
    assert last["bench"] == "produce" and last["runs"] == 2 and len(last["results"]) == 2
    assert last["errors"] == 0 and last["messages_per_s"] > 0
    for run in last["results"]:
        assert run["messages"] == run["requests"] * 10 > 0
    assert last["platform"]["started_by_bench"] is False
    for probe in ("cpu_probe", "cpu_probe_after"):  # the machine's speed goes with the figures
        assert last["host"][probe]["units"] > 0
    assert "machine: CPU probe before: unit " in result.stdout
    assert {"gateway", "write_nodes", "read_nodes"} <= set(last["results"][0]["platform_cores"])
    done = [line.split("  ")[0] for line in result.stderr.splitlines() if line.startswith("✓ ")]
    assert done == [f"✓ reaching the platform at {platform_url}", "✓ run 1/2", "✓ run 2/2"]  # progress: stderr
    assert last_json(result.stdout) == last and "✓ " not in result.stdout  # stdout: figures, JSON last


def test_latency_delivers_every_scheduled_message(platform_url: str) -> None:
    result = runner.invoke(
        app,
        ["bench", "latency", "--url", platform_url, "--rate", "200", "--seconds", "1", "--warmup", "0.2",
         "--batch", "2", "--keys", "16", "--settle", "8"],
    )
    assert result.exit_code == 0, result.output
    last = last_json(result.output)
    run = last["results"][0]
    assert run["measured_messages"] == run["scheduled_measured_messages"] == 200
    assert last["lost"] == 0 and last["send_errors"] == 0
    assert 0 < last["e2e_p50_ms"] <= last["e2e_p99_ms"] <= last["e2e_max_ms"]


def test_drain_checks_order_and_loss(platform_url: str) -> None:
    result = runner.invoke(
        app,
        ["bench", "drain", "--url", platform_url, "--consumers", "4", "--backlog", "400", "--keys", "40",
         "--work-ms", "1", "--single-seconds", "0.5", "--virtual-partitions", "8", "--timeout", "20"],
    )
    assert result.exit_code == 0, result.output
    last = last_json(result.output)
    run = last["results"][0]
    assert (last["lost"], last["reordered"], last["unexpected"]) == (0, 0, 0)
    assert run["timed_out"] is False and run["messages_per_consumer"]["mean"] * 4 >= 400
    assert last["rate_one_per_s"] > 0 and last["rate_many_per_s"] > 0
    assert last["efficiency"] == pytest.approx(last["speedup"] / 4, abs=0.01)
