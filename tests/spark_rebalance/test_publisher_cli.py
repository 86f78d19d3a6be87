"""``vpq rebalance`` through typer's CliRunner against a real redis-server, synthetic
statistics (``spark_rebalance.synthetic``) and, for the publishing run, a real write
node (``write_cluster.WriteCluster`` of one node behind a recording proxy, on its own
event loop thread) owning every partition."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.spark_rebalance.write_cluster import WriteCluster, create_queue
from vpq.cli.main import app
from vpq.common.runfiles import write_redis_url
from vpq.config.settings import RebalanceSettings
from vpq.metadata.maps import LineageRange as R
from vpq.spark_rebalance.synthetic import placement_for, queue_sizes, stats_windows, write_stats, zipf_loads
from vpq.virtual_partitions.placement import PlacementMap

PPS = [0, 1, 2, 3]
PREFIX = "vpq"  # the default key prefix: the command runs with default settings


@pytest.fixture(autouse=True)
def _no_vpq_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("VPQ_REDIS_URL", "VPQ_CONFIG", "VPQ_REDIS__URL", "VPQ_DATA_DIR", "VPQ_REBALANCE__MASTER"):
        monkeypatch.delenv(var, raising=False)


class NodeThread:
    """An event loop on a thread hosting a ``WriteCluster`` of one node (w0, owning every
    partition) and its metadata client ``md``."""

    def __init__(self, redis_url: str, data_dir: Path, pps: list[int]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.node = WriteCluster(redis_url, PREFIX, data_dir, write_nodes=1, partitions=len(pps))
        try:
            self.run(self.node.start())
        except BaseException:
            self.close()
            raise
        assert self.node.md is not None
        self.md = self.node.md

    def run(self, coro):  # noqa: ANN001, ANN201 - any coroutine
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def close(self) -> None:
        self.run(self.node.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def platform(redis_url: str, tmp_path: Path) -> Iterator[tuple[Path, NodeThread]]:
    """A data dir with run/redis.url, a map of 4 skewed queues, their lineage, one write
    node registered, and recent statistics from it."""
    data_dir = tmp_path / "data"
    write_redis_url(data_dir, redis_url)
    nt = NodeThread(redis_url, tmp_path / "write-node", PPS)
    loads = zipf_loads(num_vps=64, vps_per_queue=16, exponent=1.2, seed=3)
    current = placement_for(queue_sizes(loads), PPS)
    for name, qp in current.queues.items():
        nt.run(create_queue(nt.md, name, qp.placement))
    w = RebalanceSettings().window_ms
    now = int(time.time() * 1000) // w * w
    starts = [now - (6 - i) * w for i in range(6)]
    write_stats(data_dir / "stats", stats_windows(loads, current, starts, w, ["w0"]), w)
    try:
        yield data_dir, nt
    finally:
        nt.close()


def summary_windows(stdout: str) -> list[str]:
    """The complete windows the job used, from the plan's first reason line."""
    line = next(line for line in stdout.splitlines() if "complete window(s) from" in line)
    return ["w"] * int(line.split("statistics: ")[1].split(" complete")[0])


def _json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_dry_run_prints_the_plan_writes_the_chart_and_changes_nothing(platform) -> None:
    data_dir, nt = platform
    epoch = nt.run(nt.md.maps.epoch())
    result = CliRunner().invoke(app, ["rebalance", "--data-dir", str(data_dir), "--dry-run", "--master", "local[1]"])
    assert result.exit_code == 0, result.output
    assert "dry run" in result.output and "imbalance (max/mean) before" in result.output
    summary = _json_lines(result.output)[-1]
    assert summary["dry_run"] is True and summary["refused"] is None and summary["moves_made"] > 0
    assert Path(summary["chart"]).is_file() and Path(summary["chart"]).parent == data_dir / "rebalance"
    assert nt.run(nt.md.maps.epoch()) == epoch
    assert nt.node.fence_calls() == []
    stages = [line.split("  ")[0] for line in result.stderr.splitlines() if line.startswith("✓ ")]
    assert stages == [  # the Spark job's stages on stderr as they end, none on stdout
        "✓ starting Spark (local[1])", "✓ reading statistics",
        f"✓ aggregating and smoothing {len(summary_windows(result.stdout))} window(s) per virtual partition",
        "✓ planning moves",
    ]
    assert "✓ " not in result.stdout


def test_a_run_publishes_through_the_fenced_cutover(platform) -> None:
    data_dir, nt = platform
    before = PlacementMap.from_dict(nt.run(nt.md.maps.current()))
    result = CliRunner().invoke(app, ["rebalance", "--data-dir", str(data_dir), "--master", "local[1]"])
    assert result.exit_code == 0, result.output
    plan, published = _json_lines(result.output)[-2:]
    assert f"✓ publishing {plan['moves_made']} move(s)" in result.stderr
    pub = published["publish"]
    assert pub["status"] == "published" and len(pub["moved"]) == plan["moves_made"] > 0
    assert pub["epochs"][-2:] == [before.epoch + len(pub["epochs"]) - 1, before.epoch + len(pub["epochs"])]
    after = PlacementMap.from_dict(nt.run(nt.md.maps.current()))
    assert after.epoch == pub["epochs"][-1]
    fence_epoch = pub["epochs"][-2]
    assert {e for _, e in nt.node.fence_calls()} == {fence_epoch}
    for m in pub["moved"]:
        assert after.pp_of(m["queue"], m["vp"]) == m["to_pp"]
        lineage = nt.run(nt.md.maps.lineage(m["queue"], m["vp"]))
        assert lineage == [R(m["from_pp"], 0, 0), R(m["to_pp"], 0, None)]  # nothing was appended


def test_no_reachable_redis_exits_1_with_a_clear_message(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["rebalance", "--redis-url", "redis://127.0.0.1:1/0", "--data-dir", str(tmp_path)])
    assert r.exit_code == 1 and "cannot reach Redis at redis://127.0.0.1:1/0" in r.output
    r = CliRunner().invoke(app, ["rebalance", "--data-dir", str(tmp_path / "none")])
    assert r.exit_code == 1 and "no running platform found" in r.output


def test_every_repeats_on_the_new_map_until_interrupted(platform) -> None:
    """``--every 1`` as a real process: the first round publishes, the next rounds plan on
    the map it published (a higher epoch) and find nothing worth moving; Ctrl-C (SIGINT)
    ends the command with status 0."""
    data_dir, nt = platform
    before = nt.run(nt.md.maps.epoch())
    env = {k: v for k, v in os.environ.items() if not k.startswith("VPQ_")}
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "vpq"), "rebalance", "--data-dir", str(data_dir), "--every", "1",
         "--master", "local[1]"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    lines: list[str] = []
    rounds = 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # bounded by the test's timeout
            lines.append(line)
            if line.startswith("map epoch "):
                rounds += 1
                if rounds == 3:
                    break
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
        lines.append(rest)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = "".join(lines)
    assert rounds == 3, output
    assert proc.returncode == 0, output
    epochs = [int(m) for m in re.findall(r"^map epoch (\d+):", output, re.M)]
    published = [j["publish"] for j in _json_lines(output) if "publish" in j]
    assert len(published) == 1, output  # only the first round had something worth moving
    assert epochs[0] == before and epochs[1] == epochs[2] == published[0]["epochs"][-1] > before, output
