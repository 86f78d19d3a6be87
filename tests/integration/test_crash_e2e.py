"""Crash tests with SIGKILL of real processes (DESIGN.md guarantees 1, 2, 3)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import redis

from common.runfiles import read_redis_url
from metadata.keys import Keys
from metadata.leases import group_resource
from tests.integration.api import Api, OrderChecker
from tests.integration.conftest import FAST
from tests.integration.platform import Platform

pytestmark = pytest.mark.integration


def test_sigkill_whole_platform_keeps_every_acknowledged_message(tmp_path):
    p = Platform(tmp_path / "vpq", physical_partitions=2, env=dict(FAST))
    p.start()
    acked: dict[str, int] = {}
    try:
        api = Api(p.url)
        q = "crash"
        api.put_queue(q)

        async def produce_concurrently() -> None:
            import aiohttp

            async with aiohttp.ClientSession() as session:
                async def one(batch_no: int) -> None:
                    body = {"messages": [{"key": f"k{j % 13}", "value": {"b": batch_no, "j": j}} for j in range(50)]}
                    async with session.post(f"{p.url}/v1/queues/{q}/messages", json=body) as resp:
                        if resp.status == 200:
                            for r, m in zip((await resp.json())["results"], body["messages"]):
                                acked[r["id"]] = m["value"]["b"] * 1000 + m["value"]["j"]

                await asyncio.gather(*(one(b) for b in range(40)))

        asyncio.run(produce_concurrently())
        assert len(acked) == 2000
    finally:
        p.kill_all()  # no clean shutdown: every process gets SIGKILL right after the acks

    p.proc = None
    p.start()
    try:
        api = Api(p.url)
        cid = api.join("crash", "after")
        seen: dict[str, int] = {}
        deadline = time.monotonic() + 60
        while len(seen) < len(acked) and time.monotonic() < deadline:
            batch = api.poll("crash", "after", cid, max_messages=500, wait_ms=500)
            for m in batch:
                seen[m["id"]] = m["value"]["b"] * 1000 + m["value"]["j"]
            if batch:
                api.ack("crash", "after", cid, [m["id"] for m in batch])
        missing = set(acked) - set(seen)
        assert not missing, f"{len(missing)} acknowledged messages lost"
        assert all(seen[i] == v for i, v in acked.items())
    finally:
        p.stop()


def _group_owner(p: Platform, queue: str, group: str) -> str | None:
    """The node id holding the group's lease, read straight from the platform's Redis."""
    r = redis.Redis.from_url(read_redis_url(p.data_dir), decode_responses=True)
    try:
        return r.hget(Keys("vpq").lease(group_resource(queue, group)), "node")
    finally:
        r.close()


def _pid_of(p: Platform, node_id: str) -> int | None:
    for proc in p.children("read_nodes.main"):
        if node_id in proc.cmdline():
            return proc.pid
    return None


def test_sigkill_read_node_during_consumption(tmp_path):
    p = Platform(tmp_path / "vpq", physical_partitions=2, read_nodes=2, env=dict(FAST))
    p.start()
    try:
        api = Api(p.url)
        q = f"fail-{uuid.uuid4().hex[:6]}"
        api.put_queue(q, virtual_partitions=8, visibility_timeout_ms=5000)
        checker = OrderChecker()
        msgs = [{"key": f"k{i % 20}", "value": i} for i in range(1000)]
        for r, m in zip(api.produce(q, msgs), msgs):
            checker.produced_in_order(m["key"], r["id"])
        consumers = [api.join(q, "g") for _ in range(3)]
        done: set[str] = set()

        def consume_round() -> None:
            for i, cid in enumerate(consumers):
                pr = api.call("POST", f"/v1/queues/{q}/groups/g/consumers/{cid}/poll",
                              {"max_messages": 25, "wait_ms": 100}, expect=None)
                if pr.status_code == 404:  # forgotten with the dead node: join again
                    consumers[i] = api.join(q, "g")
                    continue
                if pr.status_code != 200:  # 503 while the group moves: retry next round
                    continue
                batch = pr.json()["messages"]
                for m in batch:
                    checker.delivered(m["key"], m["id"], batch)
                ids = [m["id"] for m in batch]
                if ids:
                    a = api.call("POST", f"/v1/queues/{q}/groups/g/consumers/{cid}/ack", {"ids": ids}, expect=None)
                    if a.status_code == 200:
                        checker.ack(ids)
                        done.update(ids)

        while len(done) < 300:
            consume_round()
        owner = _group_owner(p, q, "g")
        assert owner is not None, "the group has no read-node owner"
        victims = [proc for proc in p.children("read_nodes.main") if owner in proc.cmdline()]
        assert victims, "no read-node process found"
        victims[0].kill()  # SIGKILL
        deadline = time.monotonic() + 90
        while len(done) < len(msgs) and time.monotonic() < deadline:
            consume_round()
        assert len(done) == len(msgs), f"{len(msgs) - len(done)} messages never acknowledged after failover"
        new_owner = _group_owner(p, q, "g")
        assert new_owner is not None and new_owner != owner or victims[0].pid != _pid_of(p, owner)
        assert checker.violations == []
    finally:
        p.stop()
