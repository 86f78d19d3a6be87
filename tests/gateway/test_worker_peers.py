"""gateway.worker_peers: workers publish a private address and add up each other's shares."""

from __future__ import annotations

import json
import os

import aiohttp
import pytest

from vpq.common.redis_server import free_port
from vpq.gateway.worker_peers import METRICS_PATH, TRAFFIC_PATH, WorkerPeers
from vpq.node_rpc.cluster_auth import CLUSTER_SECRET_HEADER

SECRET = "s" * 64


def _metrics(n: int) -> bytes:
    return f"# HELP m_total things\n# TYPE m_total counter\nm_total{{q=\"x\"}} {n}.0\n".encode()


def _traffic(n: int, vps: list[int]) -> dict:
    return {
        "x": {
            "messages_total": n, "bytes_total": 10 * n, "messages_per_s": 0.0, "bytes_per_s": 0.0,
            "since_ms": 1000 + n, "scope": "gateway", "by_virtual_partition": vps,
        }
    }  # fmt: skip


def _peers(tmp_path, index: int, n: int, vps: list[int]) -> WorkerPeers:
    return WorkerPeers(tmp_path, index, SECRET, lambda: _metrics(n), lambda: _traffic(n, vps), timeout_s=0.5)


async def test_workers_add_up_each_others_shares(tmp_path) -> None:
    workers = [_peers(tmp_path, 0, 1, [1]), _peers(tmp_path, 1, 2, [0, 2]), _peers(tmp_path, 2, 4, [])]
    for w in workers:
        await w.start()
    try:
        published = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
        assert sorted(published) == ["0.json", "1.json", "2.json"]
        assert all(v["pid"] == os.getpid() for v in published.values())
        for w in workers:
            assert b'm_total{q="x"} 7.0' in await w.metrics()
            traffic = (await w.traffic())["x"]
            assert traffic["messages_total"] == 7 and traffic["by_virtual_partition"] == [1, 2]
            assert traffic["since_ms"] == 1001
    finally:
        for w in workers:
            await w.stop()
    assert list(tmp_path.glob("*.json")) == []


async def test_the_private_address_needs_the_cluster_secret(tmp_path) -> None:
    w = _peers(tmp_path, 0, 1, [])
    await w.start()
    try:
        async with aiohttp.ClientSession() as s:
            for path in (METRICS_PATH, TRAFFIC_PATH):
                async with s.get(w.url + path) as r:
                    assert r.status == 401
                    assert (await r.json())["error"]["code"] == "cluster_secret_required"
                async with s.get(w.url + path, headers={CLUSTER_SECRET_HEADER: "wrong"}) as r:
                    assert r.status == 401
                    assert (await r.json())["error"]["code"] == "bad_cluster_secret"
            async with s.get(w.url + METRICS_PATH, headers={CLUSTER_SECRET_HEADER: SECRET}) as r:
                assert r.status == 200 and await r.read() == _metrics(1)
    finally:
        await w.stop()


async def test_a_worker_that_does_not_answer_is_left_out(tmp_path) -> None:
    w = _peers(tmp_path, 0, 1, [5])
    await w.start()
    dead = tmp_path / "1.json"  # a killed worker's address: nothing listens there
    dead.write_text(json.dumps({"url": f"http://127.0.0.1:{free_port()}", "pid": 1}))
    (tmp_path / "2.json").write_text("{not json")  # a file being replaced
    try:
        assert await w.metrics() == _metrics(1)
        assert (await w.traffic())["x"]["messages_total"] == 1
    finally:
        await w.stop()
    assert dead.exists()  # only a worker's own file is removed, and only by itself


@pytest.mark.parametrize("other_pid", [True, False])
async def test_stop_leaves_a_file_a_restarted_worker_already_replaced(tmp_path, other_pid: bool) -> None:
    w = _peers(tmp_path, 0, 1, [])
    await w.start()
    own = tmp_path / "0.json"
    if other_pid:
        own.write_text(json.dumps({"url": "http://127.0.0.1:1", "pid": os.getpid() + 1}))
    await w.stop()
    assert own.exists() is other_pid
