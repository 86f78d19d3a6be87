"""`vpq up` itself: single-process mode, restart of a crashed child, clean SIGTERM stop,
resume on the same data directory, an external Redis."""

from __future__ import annotations

import time

import psutil
import pytest
import requests

from tests.integration.api import Api
from tests.integration.conftest import FAST
from tests.integration.platform import Platform

pytestmark = pytest.mark.integration


def _produce_with_retry(api: Api, queue: str, messages: list[dict], timeout_s: float = 60.0) -> list[dict]:
    """What a client does while a node restarts: retry 503s (Retry-After) until accepted."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = api.call("POST", f"/v1/queues/{queue}/messages", {"messages": messages}, expect=None)
        if r.status_code == 200:
            return r.json()["results"]
        assert r.status_code in (429, 503), r.text
        assert r.json()["error"]["code"]
        if time.monotonic() > deadline:
            raise AssertionError(f"still {r.status_code} after {timeout_s}s: {r.text}")
        time.sleep(0.2)


def _consume_all(api: Api, queue: str, group: str, want: int, timeout_s: float = 30.0) -> set[str]:
    cid = api.join(queue, group)
    seen: set[str] = set()
    deadline = time.monotonic() + timeout_s
    while len(seen) < want and time.monotonic() < deadline:
        batch = api.poll(queue, group, cid, max_messages=500, wait_ms=300)
        if batch:
            api.ack(queue, group, cid, [m["id"] for m in batch])
            seen.update(m["id"] for m in batch)
    return seen


def test_single_process_mode_and_clean_stop(tmp_path):
    p = Platform(tmp_path / "vpq", physical_partitions=2, extra_args=["--single-process"], env=dict(FAST))
    p.start()
    try:
        assert p.children("vpq.write_nodes.main") == [] and p.children("vpq.read_nodes.main") == []
        assert p.children("vpq.gateway.main") == []
        api = Api(p.url)
        api.put_queue("sp")
        ids = {r["id"] for r in api.produce("sp", [{"key": f"k{i}", "value": i} for i in range(50)])}
        assert _consume_all(api, "sp", "g", 50) == ids
        assert requests.get(p.url + "/healthz", timeout=5).status_code == 200
    finally:
        rc = p.stop()
    assert rc == 0


def test_crashed_write_node_is_restarted_and_restart_resumes(tmp_path):
    p = Platform(tmp_path / "vpq", physical_partitions=2, env=dict(FAST))
    p.start()
    try:
        api = Api(p.url)
        api.put_queue("restart")
        first = {r["id"] for r in api.produce("restart", [{"key": f"k{i}", "value": i} for i in range(100)])}
        [victim] = p.children("vpq.write_nodes.main")
        victim.kill()
        victim.wait(10)
        second = {r["id"] for r in _produce_with_retry(api, "restart", [{"key": f"k{i}", "value": i} for i in range(100)])}
        [replacement] = p.children("vpq.write_nodes.main")
        assert replacement.pid != victim.pid
        assert _consume_all(api, "restart", "g", 200) == first | second
        pids = [c.pid for c in psutil.Process(p.proc.pid).children(recursive=True)]
    finally:
        rc = p.stop()
    assert rc == 0
    time.sleep(0.5)
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]

    # restart on the same data directory resumes: the queue, its messages and the group's acks
    p2 = Platform(tmp_path / "vpq", physical_partitions=2, env=dict(FAST))
    p2.start()
    try:
        api = Api(p2.url)
        assert api.call("GET", "/v1/queues/restart").json()["name"] == "restart"
        cid = api.join("restart", "g")
        assert api.poll("restart", "g", cid, wait_ms=500) == []  # everything was acked before the stop
        assert len(_consume_all(api, "restart", "fresh", 200)) == 200
    finally:
        assert p2.stop() == 0


def test_external_redis_url(tmp_path, redis_url):
    p = Platform(tmp_path / "vpq", physical_partitions=1, redis_url=redis_url, env=dict(FAST))
    p.start()
    try:
        assert not (tmp_path / "vpq" / "redis").exists()  # no embedded Redis when a URL is given
        api = Api(p.url)
        api.put_queue("ext")
        api.produce("ext", [{"value": "x"}])
        assert len(_consume_all(api, "ext", "g", 1)) == 1
    finally:
        assert p.stop() == 0
