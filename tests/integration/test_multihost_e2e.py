"""A several-host layout on one machine: every role a ``vpq serve`` process on its own
loopback address (127.0.0.2, 127.0.0.3, ...) with its own data directory, one real
redis-server. Produce, consume and a remap through ``vpq rebalance``; replication
factor 2 with a write node killed, wiped and brought back empty; two gateways serving
one group. Figures (no timing asserts) are printed: run with ``-s`` to see them."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.integration.api import Api, OrderChecker
from tests.integration.platform import ROOT
from tests.integration.served import Served
from vpq.common.cluster_secret import create_cluster_secret
from vpq.virtual_partitions.hashing import key_hash, vp_of_hash

pytestmark = pytest.mark.integration

ENV = {
    "VPQ_REDIS__LEASE_TTL_MS": "2000",
    "VPQ_REDIS__POLL_FALLBACK_MS": "100",
    "VPQ_QUEUES__SESSION_TIMEOUT_MS": "3000",
}


@pytest.fixture
def served(tmp_path, redis_server):
    secret = tmp_path / "cluster.secret"  # every role and vpq rebalance share it
    create_cluster_secret(secret)
    cluster = Served(tmp_path, redis_server.url, dict(ENV), secret_file=secret)
    yield cluster
    cluster.close()


class Producer:
    """Threads producing keyed messages through ``url``, one key per request, retrying
    503/429 until acknowledged; records every acknowledged id per key, in order."""

    def __init__(self, url: str, queue: str, keys: list[str], pause_s: float = 0.01) -> None:
        self.url, self.queue, self.keys, self.pause_s = url, queue, keys, pause_s
        self.lock = threading.Lock()
        self.by_key: dict[str, list[str]] = {k: [] for k in keys}
        self.seq_of: dict[str, tuple[str, int]] = {}
        self.acked_at: list[tuple[float, str]] = []  # (monotonic time, key) of each acknowledged request
        self.errors: list[str] = []
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(keys[i::2],), daemon=True) for i in range(2)]

    def __enter__(self) -> Producer:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(60)

    def _run(self, keys: list[str]) -> None:
        s = requests.Session()
        seq = {k: 0 for k in keys}
        i = 0
        while not self.stop_event.is_set():
            key = keys[i % len(keys)]
            i += 1
            body = {"messages": [{"key": key, "value": {"seq": seq[key] + j}} for j in range(3)]}
            while True:
                try:
                    r = s.post(f"{self.url}/v1/queues/{self.queue}/messages", json=body, timeout=30)
                except requests.RequestException as exc:
                    with self.lock:
                        self.errors.append(f"{key}: {exc}")
                    return
                if r.status_code not in (429, 503):
                    break
                time.sleep(0.05)
            if r.status_code != 200:
                with self.lock:
                    self.errors.append(f"{key}: {r.status_code} {r.text[:200]}")
                return
            with self.lock:
                self.acked_at.append((time.monotonic(), key))
                for j, res in enumerate(r.json()["results"]):
                    self.by_key[key].append(res["id"])
                    self.seq_of[res["id"]] = (key, seq[key] + j)
            seq[key] += 3
            time.sleep(self.pause_s)


def consume_all(
    api: Api, queue: str, produced: Producer, group: str = "verify", stall_s: float = 20.0
) -> tuple[int, int]:
    """Drain ``queue`` with one consumer until every acknowledged id was delivered; asserts
    no loss and per-key order of the acknowledged messages; returns (repeated deliveries,
    messages never acknowledged: a request answered 503 whose messages were written anyway,
    then sent again)."""
    checker = OrderChecker()
    for key, ids in produced.by_key.items():
        for msg_id in ids:
            checker.produced_in_order(key, msg_id)
    want = set(produced.seq_of)
    cid = api.join(queue, group)
    seen: set[str] = set()
    repeats = 0
    extras: set[str] = set()
    last_seq: dict[str, int] = {}
    deadline = time.monotonic() + stall_s
    while not want <= seen and time.monotonic() < deadline:
        batch = api.poll(queue, group, cid, max_messages=200, wait_ms=500)
        for m in batch:
            if m["id"] not in produced.seq_of:
                extras.add(m["id"])
                continue
            checker.delivered(m["key"], m["id"], batch)
            if m["id"] in seen:
                repeats += 1
                continue
            seen.add(m["id"])
            deadline = time.monotonic() + stall_s
            key, seq = produced.seq_of[m["id"]]
            assert seq > last_seq.get(key, -1), f"{key}: seq {seq} after {last_seq[key]}"
            last_seq[key] = seq
        if batch:
            ids = [m["id"] for m in batch]
            api.ack(queue, group, cid, ids)
            checker.ack(ids)
    missing = want - seen
    assert not missing, f"{len(missing)} of {len(want)} acknowledged messages never delivered"
    assert not checker.violations, checker.violations[:5]
    return repeats, len(extras)


def keys_on(placement: list[int], pp: int, n: int, prefix: str) -> list[str]:
    """``n`` keys whose vp the placement puts on ``pp``."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        key = f"{prefix}{i}"
        i += 1
        if placement[vp_of_hash(key_hash(key), len(placement))] == pp:
            out.append(key)
    return out


def partitions(api: Api) -> dict[int, dict]:
    return {p["id"]: p for p in api.call("GET", "/v1/cluster").json()["physical_partitions"]}


@pytest.mark.timeout(120)
def test_replicated_write_node_killed_wiped_and_back_empty(served):
    t_start = time.monotonic()
    common = ("--physical-partitions", "2", "--replication-factor", "2", "--write-nodes", "2", "--min-insync", "1")
    served.write_node("w0", "127.0.0.2", *common)
    w1 = served.write_node("w1", "127.0.0.3", "--min-insync", "1")
    served.read_node("r0", "127.0.0.4")
    _, url = served.gateway("g0", "127.0.0.5")
    api = Api(url)
    api.put_queue("rep", virtual_partitions=8)
    deadline = time.monotonic() + 30
    while not all(len(p["in_sync_replicas"]) == 2 for p in partitions(api).values()):
        assert time.monotonic() < deadline, partitions(api)
        time.sleep(0.2)
    placement = api.call("GET", "/v1/maps/current").json()["queues"]["rep"]["placement"]
    led_by_w1 = [pp for pp, p in partitions(api).items() if p["leader"] == "w1"]
    assert led_by_w1, partitions(api)
    probe = keys_on(placement, led_by_w1[0], 1, "probe")[0]
    keys = keys_on(placement, 0, 3, "a") + keys_on(placement, 1, 3, "b")

    with Producer(url, "rep", keys) as producer:
        time.sleep(1.0)
        t_kill = time.monotonic()
        w1.kill()
        for path in sorted(served.data_dir("w1").rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        served.data_dir("w1").rmdir()
        while True:  # a produce to a partition w1 led
            r = requests.post(f"{url}/v1/queues/rep/messages", json={"messages": [{"key": probe, "value": 0}]}, timeout=30)
            if r.status_code == 200:
                break
            assert r.status_code in (429, 503), r.text
            assert time.monotonic() - t_kill < 30, r.text
            time.sleep(0.05)
        kill_to_produce = time.monotonic() - t_kill
        with producer.lock:
            producer.by_key.setdefault(probe, []).extend(x["id"] for x in r.json()["results"])
            producer.seq_of.update((x["id"], (probe, 0)) for x in r.json()["results"])
        time.sleep(1.0)
        t_restart = time.monotonic()
        served.write_node("w1", "127.0.0.3", "--min-insync", "1")  # same node id, empty data directory
        while not all(sorted(p["in_sync_replicas"]) == ["w0", "w1"] for p in partitions(api).values()):
            assert time.monotonic() - t_restart < 60, partitions(api)
            time.sleep(0.1)
        restart_to_in_sync = time.monotonic() - t_restart
        time.sleep(0.5)
    assert not producer.errors, producer.errors[:5]
    after_kill = sum(1 for t, _ in producer.acked_at if t > t_kill)
    repeats, extras = consume_all(api, "rep", producer)
    assert (served.data_dir("w1") / "write-node-1" / "partitions").is_dir()  # w1 holds its copies again
    print(
        f"\nmultihost R=2: kill -> first produce on w1's partition {kill_to_produce:.2f} s; restart (empty) -> "
        f"in sync {restart_to_in_sync:.2f} s; {len(producer.seq_of)} messages acknowledged "
        f"({after_kill} requests after the kill), none lost, {repeats} repeat(s), {extras} unacknowledged extra(s); test {time.monotonic() - t_start:.1f} s"
    )


@pytest.mark.timeout(120)
def test_two_gateways_serve_one_group(served):
    t_start = time.monotonic()
    served.write_node("w0", "127.0.0.2", "--physical-partitions", "2", "--write-nodes", "2")
    served.write_node("w1", "127.0.0.3")
    served.read_node("r0", "127.0.0.4")
    _, url_a = served.gateway("ga", "127.0.0.5")
    _, url_b = served.gateway("gb", "127.0.0.6")
    a, b = Api(url_a), Api(url_b)
    a.put_queue("two", virtual_partitions=8)
    ca = a.join("two", "g")
    cb = b.join("two", "g")
    sent: dict[str, int] = {}
    for i in range(100):
        api = a if i % 2 else b
        [res] = api.produce("two", [{"key": f"k{i % 10}", "value": i}])
        sent[res["id"]] = i
    delivered: dict[str, int] = {}
    by_consumer = {"a": 0, "b": 0}
    deadline = time.monotonic() + 30
    turn = 0
    while len(set(delivered)) < len(sent) and time.monotonic() < deadline:
        name, gw, other, cid = [("a", a, b, ca), ("b", b, a, cb)][turn % 2]
        turn += 1
        batch = gw.poll("two", "g", cid, max_messages=20, wait_ms=200)
        for m in batch:
            delivered[m["id"]] = delivered.get(m["id"], 0) + 1
        by_consumer[name] += len(batch)
        if batch:  # acknowledged through the other gateway
            assert other.ack("two", "g", cid, [m["id"] for m in batch]) == len(batch)
    assert set(delivered) == set(sent), f"{len(set(sent) - set(delivered))} never delivered"
    assert by_consumer["a"] and by_consumer["b"], by_consumer  # both members got work
    repeats = sum(n - 1 for n in delivered.values())
    for role, nodes in (("write", ("w0", "w1")), ("read", ("r0",))):  # nodes refuse callers without the secret
        for node in nodes:
            address = served.registered(role)[node]
            r = requests.get(f"http://{address}/internal/v1/metrics", timeout=5)
            assert r.status_code == 401 and r.json()["error"]["code"] == "cluster_secret_required", r.text
    for gw in (a, b):  # either gateway describes the same group: both members, nothing left
        group = gw.group("two", "g")
        assert sorted(m["consumer_id"] for m in group["members"]) == sorted([ca, cb]), group
        assert group["lag"]["total"] == 0, group
    print(
        f"\nmultihost gateways: {len(sent)} messages, delivered by consumer {by_consumer}, {repeats} repeat(s); "
        f"test {time.monotonic() - t_start:.1f} s"
    )


def _skewed_keys(placement: list[int]) -> list[str]:
    """Keys whose vps all sit on the one pp holding the most of the queue's vps."""
    hot = max(set(placement), key=lambda pp: (placement.count(pp), -pp))
    return keys_on(placement, hot, 8, "hot")


@pytest.mark.timeout(240)
def test_produce_consume_and_remap_across_hosts(served, tmp_path):
    t_start = time.monotonic()
    stats = tmp_path / "shared-stats"  # the statistics location every write node and the job share
    stats_set = ("--set", f"rebalance.stats_uri={stats}", "--set", "rebalance.window_ms=1000")
    served.write_node("w0", "127.0.0.2", "--physical-partitions", "4", "--write-nodes", "2", *stats_set)
    served.write_node("w1", "127.0.0.3", *stats_set)
    served.read_node("r0", "127.0.0.4")
    _, url = served.gateway("g0", "127.0.0.5")
    api = Api(url)
    api.put_queue("skew", virtual_partitions=16)
    before = api.call("GET", "/v1/maps/current").json()
    keys = _skewed_keys(before["queues"]["skew"]["placement"])
    with Producer(url, "skew", keys, pause_s=0.1) as producer:
        time.sleep(4.0)  # > 3 complete 1 s statistics windows from both write nodes
        t0 = time.monotonic()
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "vpq"), "rebalance", "--redis-url", served.redis_url,
             "--master", "local[2]", *stats_set, "--set", f"cluster.secret_file={served.secret_file}", "--set", "rebalance.max_stats_age_ms=60000"],
            cwd=ROOT, capture_output=True, text=True, timeout=200,
        )  # fmt: skip
        rebalance_s = time.monotonic() - t0
        time.sleep(1.0)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert not producer.errors, producer.errors[:5]
    after = api.call("GET", "/v1/maps/current").json()
    assert after["epoch"] > before["epoch"], out
    assert after["queues"]["skew"]["placement"] != before["queues"]["skew"]["placement"], out
    assert {p.name.split("-")[0] for p in stats.rglob("*.parquet")} >= {"w0", "w1"}  # both nodes' statistics
    repeats, extras = consume_all(api, "skew", producer)
    print(
        f"\nmultihost remap: epoch {before['epoch']} -> {after['epoch']}; {len(producer.seq_of)} messages, none lost, "
        f"{repeats} repeat(s), {extras} unacknowledged extra(s); vpq rebalance {rebalance_s:.1f} s; test {time.monotonic() - t_start:.1f} s"
    )
