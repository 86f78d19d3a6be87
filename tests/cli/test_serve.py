"""``vpq serve`` as real processes, each role on its own loopback address and data
directory, against a real redis-server: the cluster's shape is fixed by the first write
node, every node registers its ``--advertise`` address, and a write node never takes
over a partition whose log lives on another node's disk."""

from __future__ import annotations

import time

import pytest
import requests

from tests.integration.api import Api
from tests.integration.served import Served
from vpq.common.redis_server import free_port
from vpq.virtual_partitions.hashing import key_hash, vp_of_hash

pytestmark = pytest.mark.integration

ENV = {"VPQ_REDIS__LEASE_TTL_MS": "1000", "VPQ_REDIS__POLL_FALLBACK_MS": "100"}


@pytest.fixture
def served(tmp_path, redis_server):
    cluster = Served(tmp_path, redis_server.url, dict(ENV))
    yield cluster
    cluster.close()


def test_a_later_write_node_cannot_change_the_shape(served):
    served.write_node("w0", "127.0.0.2", "--physical-partitions", "2", "--write-nodes", "2")
    r = served.refused("write-node", "--node-id", "w1", "--data-dir", str(served.data_dir("w1")),
                       "--bind", "127.0.0.3", "--physical-partitions", "4")  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "physical_partitions 4 (the cluster has 2)" in " ".join(r.stderr.split()), r.stderr
    r = served.refused("write-node", "--node-id", "w1", "--bind", "127.0.0.3",
                       "--set", "cluster.replication_factor=2", "--write-nodes", "3")  # fmt: skip
    assert r.returncode == 2
    text = " ".join(r.stderr.split())
    assert "replication_factor 2 (the cluster has 1)" in text and "write_nodes 3 (the cluster has 2)" in text, text
    # without those values a node adopts the stored shape and takes the free slot
    served.write_node("w1", "127.0.0.3")
    assert "(index 1) joined the cluster: 2 physical partitions" in " ".join(served.roles[-1].output().split())
    r = served.refused("write-node", "--node-id", "w2", "--bind", "127.0.0.4")
    assert r.returncode == 2 and "all 2 write-node slots are taken" in " ".join(r.stderr.split()), r.stderr
    r = served.refused("write-node", "--node-id", "w2", "--bind", "0.0.0.0")
    assert r.returncode == 2 and "add --advertise HOST:PORT" in " ".join(r.stderr.split()), r.stderr


def test_every_node_registers_its_advertised_address(served):
    wport, rport = free_port("127.0.0.3"), free_port("127.0.0.4")
    gateway, url = served.gateway("g0", "127.0.0.5", wait=False)  # waits for the cluster to exist
    deadline = time.monotonic() + 30
    while "waiting for the first write node" not in gateway.output() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gateway.alive() and "waiting for the first write node" in gateway.output(), gateway.output()
    # bound on every interface, advertised on one loopback alias: others dial the alias
    w0 = served.write_node("w0", "0.0.0.0:%d" % wport, "--advertise", f"127.0.0.3:{wport}", "--physical-partitions", "2")
    served.read_node("r0", "0.0.0.0:%d" % rport, "--advertise", f"127.0.0.4:{rport}")
    served.read_node("r1", "127.0.0.6")  # no --advertise: the bound address
    served.wait_ready(gateway, url)
    assert served.registered("write") == {"w0": f"127.0.0.3:{wport}"}
    read = served.registered("read")
    assert read["r0"] == f"127.0.0.4:{rport}"
    assert read["r1"].startswith("127.0.0.6:") and int(read["r1"].rsplit(":", 1)[1]) > 0
    cluster = requests.get(url + "/v1/cluster", timeout=10).json()
    assert {n["id"]: n["address"] for n in cluster["write_nodes"]} == {"w0": f"127.0.0.3:{wport}"}
    api = Api(url)  # the gateway reaches the nodes at those addresses
    api.put_queue("adv")
    assert len(api.produce("adv", [{"key": f"k{i}", "value": i} for i in range(10)])) == 10
    cid = api.join("adv", "g")
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < 10 and time.monotonic() < deadline:
        got += api.poll("adv", "g", cid, wait_ms=500)
    assert sorted(m["value"] for m in got) == list(range(10))
    assert w0.stop() == 0  # SIGTERM: a clean stop, the node deregisters
    assert "w0" not in served.registered("write")


def _key_on(placement: list[int], pp: int, prefix: str) -> str:
    n = 0
    while True:
        key = f"{prefix}{n}"
        if placement[vp_of_hash(key_hash(key), len(placement))] == pp:
            return key
        n += 1


def test_a_write_node_never_takes_over_a_partition_it_has_no_log_of(served):
    """R = 1 over separate data directories: w1's partition stays unavailable while w1 is
    down (w0 must not open an empty log of it), and w1 resumes it where it stopped."""
    served.write_node("w0", "127.0.0.2", "--physical-partitions", "2", "--write-nodes", "2")
    w1 = served.write_node("w1", "127.0.0.3")
    served.read_node("r0", "127.0.0.4")
    _, url = served.gateway("g0", "127.0.0.5", "--set", "produce.budget_s=0.5")
    api = Api(url)
    api.put_queue("safe", virtual_partitions=4)
    placement = api.call("GET", "/v1/maps/current").json()["queues"]["safe"]["placement"]
    key = _key_on(placement, 1, "k")  # partition 1: home of w1 (index 1)
    assert len(api.produce("safe", [{"key": key, "value": i} for i in range(5)])) == 5

    w1.kill()
    deadline = time.monotonic() + 20
    while "w1" in served.registered("write") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "w1" not in served.registered("write")
    time.sleep(4.0)  # ~12 ownership rounds of w0 (TTL 1 s): a takeover would have happened by now
    parts = {p["id"]: p for p in api.call("GET", "/v1/cluster").json()["physical_partitions"]}
    assert parts[1]["owner"] in (None, "w1") and parts[1]["leader"] in (None, "w1"), parts[1]
    assert parts[0]["owner"] == "w0"
    assert not (served.data_dir("w0") / "partitions" / "pp-00001").exists()
    r = requests.post(f"{url}/v1/queues/safe/messages", json={"messages": [{"key": key, "value": 99}]}, timeout=30)
    assert r.status_code == 503, r.text  # unavailable, not silently restarted at offset 0

    served.write_node("w1", "127.0.0.3")  # back on its own data directory
    deadline = time.monotonic() + 30
    while True:
        r = requests.post(f"{url}/v1/queues/safe/messages", json={"messages": [{"key": key, "value": 5}]}, timeout=30)
        if r.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.status_code == 200, r.text
    cid = api.join("safe", "g")
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < 6 and time.monotonic() < deadline:
        batch = api.poll("safe", "g", cid, wait_ms=500)
        got += batch
        if batch:
            api.ack("safe", "g", cid, [m["id"] for m in batch])
    assert [m["value"] for m in got] == [0, 1, 2, 3, 4, 5]  # nothing lost, in order
