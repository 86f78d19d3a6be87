"""Issue 21: ``vpq rebalance --master spark://...`` on a Spark standalone cluster (a
master and one worker from the installed pyspark, in their own processes) against a
running ``vpq up`` whose write nodes write statistics to a shared directory
(``rebalance.stats_uri``), under live, skewed, keyed traffic.

The command runs as it would on a separate driver host: in a directory without the
platform's data directory, given only ``--redis-url`` and ``--set`` (the statistics
location, the window, the executors' memory and the driver's address), so it reads
nothing of the write nodes' local files and calls them at their registered addresses.
The executors' Python is set to a path that does not exist: the job runs no Python on
executors, so vpq (or Python) need not be installed on Spark workers.

Checks: every write node wrote its own files under the shared directory (none under
its data directory); the job ran as an application of the standalone master (its id,
printed by the command, is among the master's completed applications); the map epoch
advanced with the moves reported; one group per queue then gets every acknowledged
message, in per-key order (the checks of ``test_remap_e2e``, which runs ``local[2]``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.integration.api import Api
from tests.integration.platform import Platform
from tests.integration.spark_cluster import SparkCluster
from tests.integration.test_remap_e2e import ENV, HOT_BATCH, Sent, _consume_all, _hot_keys, _produce_until
from vpq.common.runfiles import read_redis_url

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HOT = "spark-hot"
HOT_VPS = 32
SMALL = "spark-small"
WARMUP_S = 4.0  # > 3 complete 1 s windows (the job's min_windows) from both write nodes


@pytest.fixture
def spark_cluster(tmp_path):
    yield from SparkCluster(tmp_path / "spark").running(wait=False)  # boots while vpq up starts


@pytest.fixture
def shared(tmp_path):
    return tmp_path / "shared" / "stats"


@pytest.fixture
def platform(tmp_path, shared, spark_cluster):
    p = Platform(
        tmp_path / "vpq", write_nodes=2, read_nodes=1, physical_partitions=4, env=dict(ENV),
        extra_args=["--set", f"rebalance.stats_uri={shared}"],
    )
    yield from p.running()


@pytest.mark.timeout(420)
def test_rebalance_on_a_standalone_cluster_moves_vps_without_loss_or_reordering(
    platform, spark_cluster, shared, tmp_path
):
    api = Api(platform.url)
    api.put_queue(HOT, virtual_partitions=HOT_VPS)
    api.put_queue(SMALL, virtual_partitions=2)
    before = api.call("GET", "/v1/maps/current").json()
    hot_keys, _ = _hot_keys(before["queues"][HOT]["placement"])

    sent = Sent()
    stop = threading.Event()
    threads = [
        threading.Thread(target=_produce_until, args=(platform.url, HOT, hot_keys[i::2], HOT_BATCH, stop, sent))
        for i in range(2)
    ]
    threads.append(
        threading.Thread(target=_produce_until, args=(platform.url, SMALL, ["s0", "s1"], 1, stop, sent))
    )
    for t in threads:
        t.start()
    t_traffic = time.monotonic()
    driver_dir = tmp_path / "driver"  # no .vpq here: the command finds nothing of the platform's files
    driver_dir.mkdir()
    try:
        spark_cluster.wait_ready()
        time.sleep(max(0.0, WARMUP_S - (time.monotonic() - t_traffic)))
        t0 = time.monotonic()
        proc = subprocess.run(
            [
                str(Path(sys.executable).parent / "vpq"), "rebalance", "--master", spark_cluster.master_url,
                "--redis-url", read_redis_url(platform.data_dir),
                "--set", f"cluster.secret_file={platform.data_dir / 'run' / 'cluster.secret'}",  # fences need it
                "--set", f"rebalance.stats_uri=file://{shared}",
                "--set", f"rebalance.window_ms={ENV['VPQ_REBALANCE__WINDOW_MS']}",
                "--set", f"rebalance.max_stats_age_ms={ENV['VPQ_REBALANCE__MAX_STATS_AGE_MS']}",
                "--set", "rebalance.spark_conf.spark.executor.memory=512m",
                "--set", "rebalance.spark_conf.spark.driver.host=127.0.0.1",
                # executors start no Python worker: a Python that does not exist changes nothing
                "--set", "rebalance.spark_conf.spark.pyspark.python=/nonexistent/python3",
            ],
            cwd=driver_dir, capture_output=True, text=True, timeout=300,
            env={k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"},
        )
        command_s = time.monotonic() - t0
        time.sleep(1.0)  # traffic keeps flowing on the new map for a moment
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out + spark_cluster.output()
    assert not sent.errors, sent.errors[:5]

    # statistics: each write node its own files in the shared directory, none in its data directory
    writers = {f.name.split("-w")[0] for f in shared.glob("date=*/*.parquet")}
    assert len(writers) == 2, sorted(writers)
    assert not list(platform.data_dir.glob("**/stats/date=*/*.parquet"))

    # the job ran on the standalone cluster
    app = re.search(r"Spark job \(spark://[^,]+, application (\S+)\) done in ([0-9.]+) s", out)
    assert app, out
    completed = {a["id"]: a for a in spark_cluster.state()["completedapps"]}
    assert app.group(1) in completed, (app.group(1), sorted(completed))
    assert completed[app.group(1)]["name"] == "vpq-rebalance"

    publish_lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('{"publish"')]
    assert publish_lines, f"nothing was published:\n{out}"
    publish = json.loads(publish_lines[-1])["publish"]
    after = api.call("GET", "/v1/maps/current").json()
    assert after["epoch"] > before["epoch"]
    assert publish["moved"], publish
    for m in publish["moved"]:
        assert after["queues"][m["queue"]]["placement"][m["vp"]] == m["to_pp"], (m, after)

    delivered_total = 0
    for q in (HOT, SMALL):
        want = {i for (qq, _), ids in sent.by_key.items() if qq == q for i in ids}
        delivered, unknown, checker = _consume_all(api, q, want, sent)
        missing = want - {m["id"] for m in delivered}
        assert not missing, f"{q}: {len(missing)} of {len(want)} acknowledged message(s) never delivered"
        assert not unknown, unknown[:5]
        assert not checker.violations, checker.violations[:5]
        last_seq: dict[str, int] = {}
        for m in delivered:
            _, key, seq = sent.seq_of[m["id"]]
            assert seq > last_seq.get(key, -1), f"{q}/{key}: seq {seq} delivered after {last_seq[key]}"
            last_seq[key] = seq
        delivered_total += len(delivered)
    print(
        f"\nspark standalone e2e: epoch {before['epoch']} -> {after['epoch']}; moved {len(publish['moved'])} vp(s); "
        f"{len(sent.seq_of)} msgs acknowledged, {delivered_total} delivered; application {app.group(1)}; "
        f"Spark job {app.group(2)} s; vpq rebalance command {command_s:.1f} s"
    )
