"""``vpq bench hotkey|catchup|envflood|delayed --quick`` against a real ``vpq up`` (and, for
catchup, a real redis-server): the commands run, print figures, end with one JSON line
and find no loss, reordering or env crossing where the platform guarantees none. The
figures themselves are not judged here."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.load.platform_fixtures import last_json, platform_url  # noqa: F401  (a fixture)
from tests.needs import needs_redis_binary
from vpq.cli.bench_delivery import build_config
from vpq.cli.main import app
from vpq.load.platform_bench.hotkey import HotkeyConfig

runner = CliRunner()


def test_quick_config_with_explicit_options_on_top() -> None:
    cfg = build_config(HotkeyConfig, True, backlog=300, rounds=None)
    assert cfg.backlog == 300 and cfg.rounds == HotkeyConfig.quick().rounds
    assert build_config(HotkeyConfig, False).backlog == 5_000


def test_bad_options_are_usage_errors() -> None:
    assert runner.invoke(app, ["bench", "hotkey", "--max-messages", "0"]).exit_code == 2
    assert runner.invoke(app, ["bench", "envflood", "--flood-env", "prod"]).exit_code == 2


def test_hotkey_quick(platform_url: str) -> None:
    result = runner.invoke(app, ["bench", "hotkey", "--url", platform_url, "--quick", "--backlog", "400",
                                 "--spread-keys", "50"])
    assert result.exit_code == 0, result.output
    last = last_json(result.output)
    assert last["bench"] == "hotkey" and last["hot_per_s"] > 0 and last["spread_per_s"] > 0
    assert last["ratio"] == pytest.approx(last["hot_per_s"] / last["spread_per_s"], rel=0.01)
    assert (last["lost"], last["reordered"], last["unexpected"]) == (0, 0, 0)


@needs_redis_binary
def test_catchup_quick(platform_url: str) -> None:
    result = runner.invoke(app, ["bench", "catchup", "--url", platform_url, "--quick", "--backlog", "2000"])
    assert result.exit_code == 0, result.output
    last = last_json(result.output)
    assert last["vpq_per_s"] > 0 and last["redis_per_s"] > 0 and len(last["ratio_per_round"]) == 1
    assert (last["lost"], last["reordered"], last["unexpected"]) == (0, 0, 0)
    assert {"gateway", "read_nodes", "consumer"} <= set(last["cpu_us_per_message"]["vpq"])
    assert {"redis", "consumer"} <= set(last["cpu_us_per_message"]["redis"])


def test_envflood_quick(platform_url: str) -> None:
    # 25,000 messages nobody consumes: more than the read node's window of ready messages
    # (max_unacked 20,000), which they filled before the delivery engine left them in the log
    result = runner.invoke(app, ["bench", "envflood", "--url", platform_url, "--quick", "--flood", "25000",
                                 "--prod-seconds", "1", "--settle", "10"])
    assert result.exit_code == 0, result.output
    last = last_json(result.output)
    run = last["results"][0]
    assert run["prod_expected"] == run["prod_delivered"] == 100
    assert (last["lost"], last["crossed"], last["send_errors"]) == (0, 0, 0)
    assert last["prod_p50_ms"] > 0 and last["rss_before_mb"] > 0 and last["rss_after_mb"] > 0


def test_delayed_quick(platform_url: str) -> None:
    result = runner.invoke(app, ["bench", "delayed", "--url", platform_url, "--quick", "--seconds", "2",
                                 "--pending", "5000", "--warmup", "1000"])
    assert result.exit_code == 0, result.output
    last = last_json(result.output)
    run = last["results"][0]
    assert run["produced"] == run["delivered"] == 400
    assert (last["lost"], last["duplicates"], last["early"]) == (0, 0, 0)
    assert last["lateness_p99_ms"] is not None and run["pending"] == 5000
    assert last["rss_before_mb"] > 0 and last["rss_after_mb"] > 0
