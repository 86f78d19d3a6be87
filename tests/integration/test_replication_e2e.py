"""Replicated partitions on real processes: cluster API, min_insync, and every fault kind
of ``load.replication_faults`` (SIGKILL, SIGSTOP, wiped and damaged disks, power loss)
under a retrying per-key producer, each followed by a checking consumer. The quick form
runs ``VPQ_FAULT_CYCLES`` cycles per fault (default 1); ``vpq bench replication-faults``
runs the full campaign (20 cycles each)."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import requests

from tests.integration.api import Api
from tests.integration.conftest import FAST
from tests.integration.platform import Platform
from vpq.load.replication_faults import FAULTS, FaultConfig, run_fault_campaign

pytestmark = pytest.mark.integration

CYCLES = int(os.environ.get("VPQ_FAULT_CYCLES", "1"))


def _pid(p: Platform, node_id: str) -> int:
    for proc in p.children("vpq.write_nodes.main"):
        cmd = proc.cmdline()
        if cmd[cmd.index("--node-id") + 1] == node_id:
            return proc.pid
    raise AssertionError(f"no process for {node_id}")


def test_cluster_shows_leaders_replicas_isr_and_epochs(tmp_path):
    p = Platform(tmp_path / "vpq", write_nodes=2, physical_partitions=2, replication_factor=2, env=dict(FAST))
    for _ in p.running():
        api = Api(p.url)
        api.put_queue("rq")
        results = api.produce("rq", [{"key": f"k{i}", "value": i} for i in range(40)])
        assert len(results) == 40
        deadline = time.monotonic() + 30
        while True:
            parts = api.cluster()["physical_partitions"]
            if all(len(x["in_sync_replicas"]) == 2 for x in parts) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert sorted(x["id"] for x in parts) == [0, 1]
        for x in parts:
            assert x["leader"] == x["owner"] == f"w{x['id']}"  # the home node leads
            assert x["replicas"] == [f"w{x['id']}", f"w{1 - x['id']}"]
            assert sorted(x["in_sync_replicas"]) == ["w0", "w1"]
            assert x["leader_epoch"] >= 1
        secret = p.node_headers()
        for node in api.cluster()["write_nodes"]:  # replication metrics of each leader
            text = requests.get(f"http://{node['address']}/internal/v1/metrics", headers=secret, timeout=10).text
            assert 'vpq_partition_leader_epoch{partition="' in text
            assert 'vpq_replica_lag_records{partition="' in text
            assert "vpq_partition_in_sync_replicas" in text and "vpq_replication_isr_shrinks_total" in text
        for i in range(2):  # no shared directory: each node has its own copy of each pp
            for pp in range(2):
                assert (tmp_path / "vpq" / f"write-node-{i}" / "partitions" / f"pp-{pp:05d}").is_dir()
        assert not (tmp_path / "vpq" / "partitions").exists()


def test_produce_is_503_below_min_insync_and_recovers(tmp_path):
    p = Platform(
        tmp_path / "vpq", write_nodes=2, physical_partitions=1, replication_factor=2, min_insync=2,
        env={**FAST, "VPQ_CLUSTER__REPLICA_LAG_MAX_MS": "500"},
    )
    for _ in p.running():
        api = Api(p.url)
        api.put_queue("mq")
        api.produce("mq", [{"key": "a", "value": 1}])
        follower = _pid(p, "w1")
        os.kill(follower, signal.SIGSTOP)  # the only follower stops fetching
        try:
            deadline = time.monotonic() + 30
            while True:
                r = requests.post(f"{p.url}/v1/queues/mq/messages", json={"messages": [{"value": 2}]}, timeout=30)
                if r.status_code == 503 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert r.status_code == 503, r.text
            err = r.json()["error"]
            assert err["code"] == "produce_unavailable" and err["cause"] == "not_enough_replicas", r.text
            assert "min_insync" in err["message"]
        finally:
            os.kill(follower, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = requests.post(f"{p.url}/v1/queues/mq/messages", json={"messages": [{"value": 3}]}, timeout=30)
            if r.status_code == 200:
                break
            time.sleep(0.2)
        assert r.status_code == 200, r.text


@pytest.mark.parametrize("fault", FAULTS)
def test_no_acknowledged_message_lost_under_faults(tmp_path, fault):
    lines: list[str] = []
    result = asyncio.run(run_fault_campaign(FaultConfig(faults=(fault,), cycles=CYCLES), tmp_path / "vpq", lines.append))
    assert len(lines) == CYCLES
    assert result["acked"] > 0
    assert result["lost"] == 0, (result, lines)
    assert result["reordered"] == 0, (result, lines)
    assert result["delivered"] >= result["acked"]
