"""``--set KEY=VALUE`` on the command line: bad keys and values end the command with
status 2 and a message naming the key, before anything starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from vpq.cli.main import app
from vpq.cli.rebalance_run import resolve_target
from vpq.common.runfiles import write_redis_url, write_settings
from vpq.config.overrides import parse_assignments
from vpq.config.settings import load_settings

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--set", "read_nodes.bogus=1"], "read_nodes.bogus"),
        (["--set", "read_nodes.max_unacked=0"], "read_nodes.max_unacked"),
        (["--set", "produce.budget_s=soon"], "produce.budget_s"),
        (["--set", "rebalance.publisher.fence_ttl_ms=1"], "rebalance.publisher"),
        (["--set", "gateway.port=8080", "--set", "nope"], "KEY=VALUE"),
    ],
)
@pytest.mark.parametrize("command", ["up", "rebalance"])
def test_bad_set_exits_2_naming_the_key(tmp_path, command, args, named) -> None:
    result = runner.invoke(app, [command, "--data-dir", str(tmp_path / "d"), *args])
    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output
    assert not (tmp_path / "d").exists()  # nothing was started


def test_up_help_lists_set() -> None:
    result = runner.invoke(app, ["up", "--help"])
    assert result.exit_code == 0 and "--set" in result.output


def test_rebalance_applies_set_over_the_running_platforms_settings(tmp_path) -> None:
    dd = tmp_path / "d"
    running = load_settings(None, {"data_dir": dd, "rebalance.publisher.cas_attempts": 3, "produce.budget_s": 2.0})
    write_settings(running)
    write_redis_url(dd, "redis://127.0.0.1:1/0")
    target = resolve_target(dd, None, None, {"rebalance.publisher.fence_budget_s": 4.0})
    p = target.settings.rebalance.publisher
    assert (p.cas_attempts, p.fence_budget_s, target.settings.produce.budget_s) == (3, 4.0, 2.0)
    assert target.redis_url == "redis://127.0.0.1:1/0"


def test_set_reaches_one_entry_of_spark_conf_and_keeps_the_others(tmp_path) -> None:
    dd = tmp_path / "d"
    running = load_settings(None, {"data_dir": dd, "rebalance.spark_conf": {"spark.executor.memory": "2g"}})
    write_settings(running)
    write_redis_url(dd, "redis://127.0.0.1:1/0")
    overrides = parse_assignments(
        ["rebalance.spark_conf.spark.driver.host=10.0.0.5", "rebalance.spark_conf.spark.cores.max=4"]
    )
    assert overrides == {"rebalance.spark_conf": {"spark.driver.host": "10.0.0.5", "spark.cores.max": "4"}}
    target = resolve_target(dd, None, None, overrides)
    assert target.settings.rebalance.spark_conf == {
        "spark.executor.memory": "2g", "spark.driver.host": "10.0.0.5", "spark.cores.max": "4"
    }
    whole = parse_assignments(['rebalance.spark_conf={"spark.master.rest.enabled": "true"}'])
    assert load_settings(None, whole).rebalance.spark_conf == {"spark.master.rest.enabled": "true"}
    with pytest.raises(ValueError, match="rebalance.spark_confs"):
        parse_assignments(["rebalance.spark_confs.spark.x=1"])
