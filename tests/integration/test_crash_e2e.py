"""Crash tests with SIGKILL of real processes (DESIGN.md guarantees 1, 2, 3)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import pytest
import redis

from tests.integration.api import Api, OrderChecker
from tests.integration.conftest import FAST
from tests.integration.platform import Platform
from vpq.common.runfiles import read_redis_url
from vpq.metadata.keys import Keys
from vpq.metadata.leases import group_resource

pytestmark = pytest.mark.integration


async def _produce(url: str, queue: str, acked: dict[str, int], batches: int, kill: Callable[[], None] | None) -> int:
    """``batches`` concurrent produce requests of 50 messages (value b * 1000 + j); records
    the id of every message answered 200 in ``acked``. With ``kill``: 16 producers send
    batches back to back, and right after the answer that brings the acknowledged
    messages to 400 or more, ``kill()`` runs on the loop thread while the other requests
    are outstanding (no response is read meanwhile); the requests it cut fail and count
    as not acknowledged. Returns the requests outstanding at the kill (0 without one)."""
    import aiohttp

    inflight = [0]
    outstanding = [0]
    next_batch = iter(range(batches))
    stop = asyncio.Event()

    async def one(session: aiohttp.ClientSession, batch_no: int) -> None:
        body = {"messages": [{"key": f"k{j % 13}", "value": {"b": batch_no, "j": j}} for j in range(50)]}
        inflight[0] += 1
        try:
            async with session.post(f"{url}/v1/queues/{queue}/messages", json=body) as resp:
                if resp.status == 200:
                    for r, m in zip((await resp.json())["results"], body["messages"]):
                        acked[r["id"]] = m["value"]["b"] * 1000 + m["value"]["j"]
                    if kill is not None and not stop.is_set() and len(acked) >= 400:
                        stop.set()
                        outstanding[0] = inflight[0] - 1  # the others
                        kill()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            pass  # cut by the kill: not acknowledged
        finally:
            inflight[0] -= 1

    async def producer(session: aiohttp.ClientSession) -> None:
        for batch_no in next_batch:
            if stop.is_set():
                return
            await one(session, batch_no)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        if kill is None:
            await asyncio.gather(*(one(session, b) for b in range(batches)))
            return 0
        await asyncio.gather(*(producer(session) for _ in range(16)))
        return outstanding[0]


def _restart_and_check(p: Platform, queue: str, acked: dict[str, int]) -> None:
    """Start the platform again and consume ``queue``: every acknowledged message is
    delivered, with its value."""
    p.proc = None
    p.start()
    try:
        api = Api(p.url)
        cid = api.join(queue, "after")
        seen: dict[str, int] = {}
        deadline = time.monotonic() + 60
        while not set(acked) <= set(seen) and time.monotonic() < deadline:
            batch = api.poll(queue, "after", cid, max_messages=500, wait_ms=500)
            for m in batch:
                seen[m["id"]] = m["value"]["b"] * 1000 + m["value"]["j"]
            if batch:
                api.ack(queue, "after", cid, [m["id"] for m in batch])
        missing = set(acked) - set(seen)
        assert not missing, f"{len(missing)} acknowledged messages lost"
        assert all(seen[i] == v for i, v in acked.items())
    finally:
        p.stop()


def test_sigkill_whole_platform_keeps_every_acknowledged_message(tmp_path):
    p = Platform(tmp_path / "vpq", physical_partitions=2, env=dict(FAST))
    p.start()
    acked: dict[str, int] = {}
    try:
        Api(p.url).put_queue("crash")
        asyncio.run(_produce(p.url, "crash", acked, 40, None))
        assert len(acked) == 2000
    finally:
        p.kill_all()  # no clean shutdown: every process gets SIGKILL right after the acks
    _restart_and_check(p, "crash", acked)


def test_sigkill_with_produce_requests_in_flight_keeps_every_acknowledged_message(tmp_path):
    """The platform is killed while requests are outstanding: what was answered 200
    before the kill survives; what was cut may or may not."""
    p = Platform(tmp_path / "vpq", physical_partitions=2, env=dict(FAST))
    p.start()
    acked: dict[str, int] = {}
    try:
        Api(p.url).put_queue("inflight")
        outstanding = asyncio.run(_produce(p.url, "inflight", acked, 100_000, p.kill_all))
    finally:
        p.kill_all()
    assert outstanding > 0, "the kill did not happen while requests were in flight"
    assert len(acked) >= 400
    _restart_and_check(p, "inflight", acked)


def _group_owner(p: Platform, queue: str, group: str) -> str | None:
    """The node id holding the group's lease, read straight from the platform's Redis."""
    r = redis.Redis.from_url(read_redis_url(p.data_dir), decode_responses=True)
    try:
        return r.hget(Keys("vpq").lease(group_resource(queue, group)), "node")
    finally:
        r.close()


def _pid_of(p: Platform, node_id: str) -> int | None:
    for proc in p.children("vpq.read_nodes.main"):
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
        victims = [proc for proc in p.children("vpq.read_nodes.main") if owner in proc.cmdline()]
        assert victims, "no read-node process found"
        victims[0].kill()  # SIGKILL
        deadline = time.monotonic() + 90
        while len(done) < len(msgs) and time.monotonic() < deadline:
            consume_round()
        assert len(done) == len(msgs), f"{len(msgs) - len(done)} messages never acknowledged after failover"
        new_owner = _group_owner(p, q, "g")
        assert new_owner is not None, "no read node owns the group after the failover"
        new_pid = _pid_of(p, new_owner)
        assert new_pid is not None and new_pid != victims[0].pid, (
            f"the group is not owned by a live read node other than the killed one (owner {new_owner})"
        )
        assert checker.violations == []
    finally:
        p.stop()
