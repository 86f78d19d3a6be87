"""Metadata on a Sentinel-managed Redis: SIGKILL of the master under traffic.

A real master (AOF, fsync always), one replica and three Sentinels (tests.sentinel_cluster);
``vpq up --redis-url redis+sentinel://...`` with two write nodes and replication factor 2
(leadership records are written, and WAITed for, on the replicated master). A producer thread sends small batches back to
back (a failed request is simply not acknowledged; the next batch is new), a consumer
thread polls and acks, rejoining when its consumer is gone. Once some traffic went through,
the master gets SIGKILL. Checks: the Sentinels promote the replica, produce and consume
work again (the time until they do is printed, not asserted), every acknowledged message
is delivered, and per-key order holds (tests.integration.api.OrderChecker).
"""

from __future__ import annotations

import collections
import threading
import time

import pytest
import requests

from tests.integration.api import OrderChecker, unique_name
from tests.integration.conftest import FAST
from tests.integration.platform import Platform
from tests.sentinel_cluster import SentinelCluster

pytestmark = pytest.mark.integration

KEYS = 5


class Traffic:
    """The producer and consumer threads and what they saw (times are monotonic)."""

    def __init__(self, url: str, queue: str, group: str) -> None:
        self.url, self.queue, self.group = url, queue, group
        self.lock = threading.Lock()
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.order = OrderChecker()
        self.acked_at: dict[str, float] = {}  # message id -> when its produce was answered 200
        self.key_of: dict[str, str] = {}
        self.seen: set[str] = set()
        self.produce_failures = 0
        self.poll_failures = 0
        self.kill_at: float | None = None
        self.produce_back: float | None = None  # first 200 of a request sent after the kill
        self.consume_back: float | None = None  # first delivery of a message produced after the kill

    def produce(self) -> None:
        s = requests.Session()
        n = 0
        while not self.stop_producing.is_set():
            body = {"messages": [{"key": f"k{(n + j) % KEYS}", "value": n + j} for j in range(10)]}
            sent = time.monotonic()
            try:
                r = s.post(f"{self.url}/v1/queues/{self.queue}/messages", json=body, timeout=5)
            except requests.RequestException:
                r = None
            if r is not None and r.status_code == 200:
                now = time.monotonic()
                with self.lock:
                    for res, m in zip(r.json()["results"], body["messages"], strict=True):
                        self.order.produced_in_order(m["key"], res["id"])
                        self.acked_at[res["id"]] = now
                        self.key_of[res["id"]] = m["key"]
                    if self.kill_at is not None and self.produce_back is None and sent > self.kill_at:
                        self.produce_back = now
            else:
                self.produce_failures += 1
                time.sleep(0.1)
            n += 10
            time.sleep(0.01)

    def _join(self, s: requests.Session) -> str | None:
        try:
            r = s.post(f"{self.url}/v1/queues/{self.queue}/groups/{self.group}/consumers", json={}, timeout=5)
        except requests.RequestException:
            return None
        return r.json()["consumer_id"] if r.status_code == 200 else None

    def consume(self) -> None:
        s = requests.Session()
        cid: str | None = None
        while not self.stop_consuming.is_set():
            if cid is None:
                cid = self._join(s)
                if cid is None:
                    self.poll_failures += 1
                    time.sleep(0.2)
                    continue
            base = f"{self.url}/v1/queues/{self.queue}/groups/{self.group}/consumers/{cid}"
            r = None
            try:
                r = s.post(f"{base}/poll", json={"max_messages": 200, "wait_ms": 200}, timeout=5)
                if r.status_code != 200:
                    raise requests.RequestException(f"poll {r.status_code} {r.text[:200]}")
                batch = r.json()["messages"]
                now = time.monotonic()
                with self.lock:
                    for m in batch:
                        if m["id"] in self.key_of:  # a message whose produce was answered 200
                            self.order.delivered(self.key_of[m["id"]], m["id"], batch)
                        self.seen.add(m["id"])
                        at = self.acked_at.get(m["id"])
                        if self.kill_at is not None and self.consume_back is None and at is not None and at > self.kill_at:
                            self.consume_back = now
                if batch:
                    ids = [m["id"] for m in batch]
                    a = s.post(f"{base}/ack", json={"ids": ids}, timeout=5)
                    if a.status_code != 200:
                        raise requests.RequestException(f"ack {a.status_code} {a.text[:200]}")
                    with self.lock:
                        self.order.ack(ids)
            except requests.RequestException:
                self.poll_failures += 1
                cid = None if r is not None and r.status_code in (404, 410) else cid
                time.sleep(0.2)

    def missing(self) -> set[str]:
        with self.lock:
            return set(self.acked_at) - self.seen


def _until_promoted(cluster: SentinelCluster, old_master: int, deadline: float) -> float:
    while time.monotonic() < deadline:
        try:
            if cluster.master_port() != old_master:
                return time.monotonic()
        except Exception:  # a Sentinel busy with the failover: ask again
            pass
        time.sleep(0.05)
    raise AssertionError("the Sentinels did not promote the replica")


def _until_metadata_works(url: str, deadline: float) -> float:
    """Until a new queue (queue record + map epoch, both WAITed) is created, and a message
    produced to it is delivered to a new group's consumer (group and lease records)."""
    s = requests.Session()
    queue = unique_name("after")
    while time.monotonic() < deadline:
        try:
            if s.put(f"{url}/v1/queues/{queue}", json={}, timeout=5).status_code not in (200, 201):
                raise requests.RequestException("create")
            if s.post(f"{url}/v1/queues/{queue}/messages", json={"messages": [{"value": 1}]}, timeout=5).status_code != 200:
                raise requests.RequestException("produce")
            r = s.post(f"{url}/v1/queues/{queue}/groups/g/consumers", json={}, timeout=5)
            if r.status_code != 200:
                raise requests.RequestException("join")
            poll = f"{url}/v1/queues/{queue}/groups/g/consumers/{r.json()['consumer_id']}/poll"
            r = s.post(poll, json={"max_messages": 10, "wait_ms": 1000}, timeout=5)
            if r.status_code == 200 and r.json()["messages"]:
                return time.monotonic()
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise AssertionError("metadata operations never worked again after the kill")


def test_sigkill_of_the_redis_master_fails_over_without_losing_acknowledged_messages(tmp_path) -> None:
    cluster = SentinelCluster(tmp_path / "redis")
    cluster.start()
    try:
        old_master = cluster.master_port()
        p = Platform(
            tmp_path / "vpq", write_nodes=2, replication_factor=2, physical_partitions=2,
            redis_url=cluster.url, env=dict(FAST),
        )
        for platform in p.running():
            queue, group = unique_name("fo"), "g"
            r = requests.put(f"{platform.url}/v1/queues/{queue}", json={}, timeout=30)
            assert r.status_code in (200, 201), r.text
            t = Traffic(platform.url, queue, group)
            threads = [threading.Thread(target=t.produce), threading.Thread(target=t.consume)]
            for th in threads:
                th.start()
            try:
                deadline = time.monotonic() + 20
                while len(t.seen) < 200 and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert len(t.seen) >= 200, "traffic did not start"
                with t.lock:
                    t.kill_at = time.monotonic()
                cluster.kill_master()
                promoted_at = _until_promoted(cluster, old_master, t.kill_at + 30)
                metadata_at = _until_metadata_works(platform.url, t.kill_at + 60)
                deadline = t.kill_at + 60
                while (t.produce_back is None or t.consume_back is None) and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(3.0)  # past the lease TTL (2 s): leases live on the new master now
            finally:
                t.stop_producing.set()
                threads[0].join(10)
            deadline = time.monotonic() + 30
            while t.missing() and time.monotonic() < deadline:
                time.sleep(0.1)
            t.stop_consuming.set()
            threads[1].join(10)
            kill_at = t.kill_at
            print(
                f"\nfailover: replica promoted after {promoted_at - kill_at:.2f}s, new queue + produce + consume "
                f"after {metadata_at - kill_at:.2f}s; existing queue: "
                f"produce back after {(t.produce_back or float('nan')) - kill_at:.2f}s, "
                f"consume back after {(t.consume_back or float('nan')) - kill_at:.2f}s; "
                f"{len(t.acked_at)} acknowledged, {t.produce_failures} failed produce requests, "
                f"{t.poll_failures} failed poll/ack/join requests"
            )
            assert t.produce_back is not None, f"produce never worked again after the kill\n{platform.output()}"
            assert t.consume_back is not None, f"consume never worked again after the kill\n{platform.output()}"
            lost = t.missing()
            assert not lost, (
                f"{len(lost)} acknowledged messages never delivered (by partition: "
                f"{sorted(collections.Counter(i.split('-')[0] for i in lost).items())}, first "
                f"{sorted(lost, key=lambda i: tuple(map(int, i.split('-'))))[:3]})\n{platform.output()}"
            )
            assert not t.order.violations, t.order.violations[:5]
    finally:
        cluster.stop()
