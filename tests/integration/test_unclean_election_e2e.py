"""An operator's unclean election on real processes (R=2, 1 partition): a failed leader
whose only follower is out of sync is not replaced by itself; ``POST
/v1/cluster/partitions/{pp}/leader`` with ``unclean`` does it, reports the truncation
event, produce resumes, and the old leader coming back truncates to the new history."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import redis
import requests

from tests.integration.api import Api
from tests.integration.conftest import FAST
from tests.integration.platform import Platform
from tests.integration.replica_helpers import until, write_node_pid
from vpq.common.runfiles import read_redis_url

pytestmark = pytest.mark.integration

LEADER_PATH = "/v1/cluster/partitions/0/leader"




def _part(api: Api) -> dict:
    return api.cluster()["physical_partitions"][0]


def _produce(p: Platform, n: int, tag: str) -> requests.Response:
    body = {"messages": [{"key": f"k{i % 3}", "value": f"{tag}-{i}"} for i in range(n)]}
    return requests.post(f"{p.url}/v1/queues/uq/messages", json=body, timeout=60)


def test_unclean_election_by_an_operator(tmp_path):
    p = Platform(
        tmp_path / "vpq", write_nodes=2, physical_partitions=1, replication_factor=2, min_insync=1,
        env={**FAST, "VPQ_CLUSTER__REPLICA_LAG_MAX_MS": "500", "VPQ_PRODUCE__BUDGET_S": "1"},
    )
    for _ in p.running():
        api = Api(p.url)
        api.put_queue("uq")
        assert _produce(p, 20, "a").status_code == 200
        until("both replicas in sync", lambda: sorted(_part(api)["in_sync_replicas"]) == ["w0", "w1"])
        first = _part(api)
        assert first["leader"] == "w0"
        follower = write_node_pid(p, "w1")
        os.kill(follower, signal.SIGSTOP)  # the follower falls out of sync
        until("w1 out of the in-sync set", lambda: _part(api)["in_sync_replicas"] == ["w0"])
        r = _produce(p, 30, "b")  # acknowledged by the leader alone (min_insync 1)
        assert r.status_code == 200, r.text
        end = _part(api)["high_watermark"]
        r_md = redis.Redis.from_url(read_redis_url(p.data_dir), decode_responses=True)
        until("the leader reported its watermark", lambda: r_md.hget("vpq:pp_leader:0", "hw") == str(end))

        leader = write_node_pid(p, "w0")
        os.kill(leader, signal.SIGSTOP)  # the leader fails (stopped: the supervisor does not restart it)
        os.kill(follower, signal.SIGCONT)
        try:
            until("the lease of the failed leader expires", lambda: _part(api)["owner"] is None)
            until("w1 registered again", lambda: "w1" in {n["id"] for n in api.cluster()["write_nodes"]})
            time.sleep(1)  # ownership rounds of w1 (and the 503 below spans more): no automatic promotion
            stuck = _part(api)
            assert (stuck["leader"], stuck["leader_epoch"], stuck["owner"]) == ("w0", first["leader_epoch"], None)
            r = _produce(p, 1, "c")
            assert r.status_code == 503 and r.json()["error"]["code"] == "produce_unavailable", r.text

            def call(body: Any, path: str = LEADER_PATH) -> requests.Response:
                return requests.post(p.url + path, json=body, timeout=30)

            refused = call({"node": "w1"})
            assert refused.status_code == 409 and refused.json()["error"]["code"] == "replica_not_in_sync"
            assert call({"node": "w9", "unclean": True}).json()["error"]["code"] == "node_not_found"
            assert call({"node": "w1", "unclean": True}, "/v1/cluster/partitions/5/leader").status_code == 404
            assert call({"node": 1}).status_code == 400
            assert call({"node": "w1", "unclean": "yes"}).status_code == 400
            assert _part(api)["leader_epoch"] == first["leader_epoch"]  # the refusals changed nothing

            cli = [sys.executable, "-m", "vpq.cli.main", "cluster", "elect", "0", "w1", "--url", p.url]
            refused_cli = subprocess.run(cli, capture_output=True, text=True, timeout=60)
            assert refused_cli.returncode == 1 and "replica_not_in_sync" in refused_cli.stderr, refused_cli
            done = until("the unclean election (vpq cluster elect --unclean)", lambda: (x := subprocess.run(
                [*cli, "--unclean", "--yes", "--json"], capture_output=True, text=True, timeout=60,
            )).returncode == 0 and x)
            answer = json.loads(done.stdout)
            assert answer["leader"] == "w1" and answer["unclean"] is True and answer["in_sync_replicas"] == ["w1"]
            event = answer["truncation"]
            assert (event["previous_leader"], event["high_watermark"]) == ("w0", end)
            assert event["new_leader_end"] == end - 30 and event["lost_offsets"] == 30
            r = until("produce resumes", lambda: (x := _produce(p, 5, "d")).status_code == 200 and x)
            assert all(m["partition"] == 0 for m in r.json()["results"])
            led = _part(api)
            assert led["leader"] == led["owner"] == "w1" and led["leader_epoch"] > first["leader_epoch"]
            assert led["last_unclean_election"]["lost_offsets"] == 30
        finally:
            os.kill(leader, signal.SIGCONT)  # the old leader comes back: its lease is gone, it follows

        back = until(
            "the old leader truncated and back in sync",
            lambda: (x := _part(api))["last_unclean_election"]["truncated"].get("w0") is not None
            and sorted(x["in_sync_replicas"]) == ["w0", "w1"] and x,
            timeout_s=60,
        )
        assert back["last_unclean_election"]["truncated"] == {"w0": 30}
        assert back["leader"] == "w1"
        w1 = next(n for n in api.cluster()["write_nodes"] if n["id"] == "w1")
        text = requests.get(f"http://{w1['address']}/internal/v1/metrics", headers=p.node_headers(), timeout=10).text
        assert "vpq_replication_unclean_elections_total 1.0" in text
        assert "vpq_replication_unclean_lost_offsets_total 30.0" in text
        # the old leader's copy is the new history: the lost records are gone, new ones follow
        group = api.join("uq", "g", start="earliest")
        values: list[str] = []
        deadline = time.monotonic() + 30
        while len(values) < 25 and time.monotonic() < deadline:
            msgs = api.poll("uq", "g", group, wait_ms=500)
            values += [m["value"] for m in msgs]
            if msgs:
                api.ack("uq", "g", group, [m["id"] for m in msgs])
        assert sorted(values) == sorted([f"a-{i}" for i in range(20)] + [f"d-{i}" for i in range(5)])
