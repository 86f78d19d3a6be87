"""ClusterBackend against a real redis-server and real nodes (``WriteNodeService``,
``ReadNodeService``) started in the test as it needs them; readiness is checked on node
records alone. One test drives it through the gateway app."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer

from vpq.common.errors import NotFound, PayloadTooLarge, Unavailable
from vpq.config.settings import ClusterSettings, RedisSettings, Settings
from vpq.gateway.app import create_app
from vpq.gateway.backend import JoinSpec, ResolvedMessage
from vpq.gateway.cluster_backend import ClusterBackend
from vpq.isolation.context import IsolationContext
from vpq.metadata.leases import group_resource, pp_resource
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.node_directory import group_key, rendezvous_pick
from vpq.produce_path.outgoing import OutgoingBatch
from vpq.produce_path.produce import AppendPolicy
from vpq.read_nodes.service import ReadNodeService
from vpq.write_nodes.service import WriteNodeService

K = 2


def nowhere() -> str:
    """An address where nothing listens (node records that no call reaches)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@dataclass
class Cluster:
    settings: Settings
    redis_url: str
    md: MetadataStore
    backend: ClusterBackend
    nodes: list[WriteNodeService | ReadNodeService] = field(default_factory=list)

    async def add_writer(self) -> WriteNodeService:
        """The real write node ``w1``: it registers itself and leases every pp."""
        node = WriteNodeService(self.settings, "w1", 0, self.redis_url)
        await node.start()
        self.nodes.append(node)
        await self.backend.ready()  # refreshes the backend's node directories
        return node

    async def add_reader(self, node_id: str) -> ReadNodeService:
        node = ReadNodeService(self.settings, node_id, self.redis_url)
        await node.start()
        self.nodes.append(node)
        await self.backend.ready()
        return node


@pytest.fixture
async def cluster(redis_url: str, key_prefix: str, tmp_path: Path) -> AsyncIterator[Cluster]:
    settings = Settings(
        data_dir=tmp_path / "data",
        redis=RedisSettings(key_prefix=key_prefix, poll_fallback_ms=50),
        cluster=ClusterSettings(physical_partitions=K),
    )
    md = MetadataStore(settings.redis, url=redis_url)
    await md.start()
    backend = ClusterBackend(settings, redis_url, policy=AppendPolicy(budget_s=1.0))
    await backend.start()
    c = Cluster(settings, redis_url, md, backend)
    yield c
    await backend.stop()
    await backend.stop()  # idempotent
    for n in reversed(c.nodes):
        await n.stop()
    await md.stop()


def msg(key: str | None, value: object, size: int = 0) -> ResolvedMessage:
    data = orjson.dumps(value) if not size else orjson.dumps("x" * size)
    return ResolvedMessage(key, data, True, {}, IsolationContext())


def batch(*messages: ResolvedMessage) -> OutgoingBatch:
    return OutgoingBatch.from_messages(messages)


async def test_ready_needs_nodes_and_owned_partitions(cluster: Cluster) -> None:
    b = cluster.backend
    assert not await b.ready()
    await cluster.md.nodes.register_node("w1", "write", nowhere(), 60_000)
    await cluster.md.leases.acquire(pp_resource(0), "w1", 60_000)
    await cluster.md.nodes.register_node("r1", "read", nowhere(), 60_000)
    assert not await b.ready()  # pp 1 has no owner
    await cluster.md.leases.acquire(pp_resource(1), "w1", 60_000)
    assert await b.ready()


async def test_partition_count_comes_from_the_cluster(cluster: Cluster, redis_url: str) -> None:
    """A cluster created with 3 pps keeps them whatever a later process's settings say."""
    settings = Settings(
        redis=RedisSettings(key_prefix=cluster.settings.redis.key_prefix + "x"), cluster=ClusterSettings(physical_partitions=3)
    )
    first = ClusterBackend(settings, redis_url)
    await first.start()
    await first.stop()
    later = ClusterBackend(settings.model_copy(update={"cluster": ClusterSettings(physical_partitions=1)}), redis_url)
    await later.start()
    try:
        md = MetadataStore(settings.redis, url=redis_url)
        await md.start()
        await md.nodes.register_node("w1", "write", nowhere(), 60_000)
        await md.nodes.register_node("r1", "read", nowhere(), 60_000)
        for pp in range(2):
            await md.leases.acquire(pp_resource(pp), "w1", 60_000)
        assert not await later.ready()  # pp 2 has no owner
        await md.leases.acquire(pp_resource(2), "w1", 60_000)
        assert await later.ready()
        info, _ = await later.put_queue("q", {"virtual_partitions": 4})
        assert sorted(set(info["placement"])) == [0, 1, 2]
        await md.stop()
    finally:
        await later.stop()


async def test_produce_appends_durably_through_the_write_node(cluster: Cluster) -> None:
    await cluster.add_writer()
    await cluster.add_reader("r1")
    b = cluster.backend
    info, created = await b.put_queue("orders", {"virtual_partitions": 4})
    assert created and sorted(set(info["placement"])) == [0, 1]
    results = (await b.produce("orders", batch(msg("a", 1), msg("b", 2), msg(None, 3)))).dicts()
    assert [r["id"] for r in results] == [f"{r['partition']}-{r['offset']}" for r in results]
    joined = await b.join("orders", "check", JoinSpec(None))
    stored: dict[str, dict] = {}
    for _ in range(10):  # read back by the real read node
        if len(stored) == 3:
            break
        polled = await b.poll("orders", "check", joined["consumer_id"], 10, 1000)
        stored.update((m["id"], m) for m in orjson.loads(polled.body)["messages"])
    assert set(stored) == {r["id"] for r in results}
    for r, value in zip(results, (1, 2, 3), strict=True):
        m = stored[r["id"]]
        assert (m["queue"], m["partition"], m["offset"]) == ("orders", r["partition"], r["offset"])
        assert m["virtual_partition"] == r["virtual_partition"] and m["value"] == value
        assert info["placement"][r["virtual_partition"]] == r["partition"]
    await b.leave("orders", "check", joined["consumer_id"])
    got = await b.get_queue("orders")
    assert got["traffic"]["messages_total"] == 3 and got["traffic"]["bytes_total"] > 0
    metrics = await b.metrics_text()
    assert "vpq_produce_messages_total 3" in metrics and "vpq_cluster_map_epoch 1" in metrics
    assert [q["name"] for q in await b.list_queues()] == ["orders"]


async def test_oversize_message_is_413_and_nothing_is_appended(cluster: Cluster) -> None:
    await cluster.add_writer()
    b = cluster.backend
    await b.put_queue("small", {"max_message_bytes": 100})
    with pytest.raises(PayloadTooLarge) as info:
        await b.produce("small", batch(msg("a", 1), msg("b", None, size=200), msg("c", None, size=300)))
    assert info.value.code == "message_too_large" and info.value.details["index"] == 1
    assert [p["end_offset"] for p in (await b.cluster())["physical_partitions"]] == [0] * K  # nothing appended


async def test_unknown_queue_is_404(cluster: Cluster) -> None:
    await cluster.add_writer()
    await cluster.add_reader("r1")
    b = cluster.backend
    with pytest.raises(NotFound) as info:
        await b.produce("ghost", batch(msg("a", 1)))
    assert info.value.code == "queue_not_found"
    with pytest.raises(NotFound):
        await b.join("ghost", "g", JoinSpec(None))
    with pytest.raises(NotFound):
        await b.delete_queue("ghost")
    assert await cluster.md.groups.groups("ghost") == []  # no read node was asked to create the group


async def test_produce_to_a_queue_created_elsewhere(cluster: Cluster) -> None:
    await cluster.add_writer()
    other = ClusterBackend(cluster.settings, cluster.redis_url)
    await other.start()
    try:
        await other.put_queue("elsewhere", {"virtual_partitions": 1})
    finally:
        await other.stop()
    results = (await cluster.backend.produce("elsewhere", batch(msg("k", 1)))).dicts()
    assert results[0]["offset"] == 0


async def test_consumer_calls_follow_the_group_owner(cluster: Cluster) -> None:
    await cluster.add_writer()
    readers = {r: await cluster.add_reader(r) for r in ("r1", "r2")}
    b = cluster.backend
    await b.put_queue("q", {"virtual_partitions": 1})
    chosen_id = rendezvous_pick(group_key("q", "g"), ["r1", "r2"])
    owner_id = "r2" if chosen_id == "r1" else "r1"
    join = {"consumer_id": "c0", "env": "prod", "set": "", "lane": "", "start": "earliest"}
    async with aiohttp.ClientSession() as session:  # the other node takes the group first: it holds the lease
        url = f"http://{readers[owner_id].address}/internal/v1/queues/q/groups/g/consumers"
        async with session.post(url, json=join) as r:
            assert r.status == 200, await r.text()
    joined = await b.join("q", "g", JoinSpec("c1", IsolationContext(env="test", lane="feat-a"), "latest"))
    assert joined["consumer_id"] == "c1"
    assert "vpq_consumer_forwards_total 1" in await b.metrics_text()  # the chosen node named the owner
    members = {m["consumer_id"]: m for m in (await b.group_info("q", "g"))["members"]}
    assert (members["c1"]["env"], members["c1"]["set"], members["c1"]["lane"]) == ("test", "", "feat-a")
    polled = await b.poll("q", "g", "c1", 10, 0)  # passed through encoded, with its count
    assert polled.count == 0 and orjson.loads(polled.body) == {"messages": []}
    test_lane = IsolationContext(env="test", lane="feat-a")
    await b.produce("q", batch(ResolvedMessage("k", b"1", True, {}, test_lane), ResolvedMessage("k", b"2", True, {}, test_lane)))
    polled = await b.poll("q", "g", "c1", 10, 5000)
    ids = [m["id"] for m in orjson.loads(polled.body)["messages"]]
    assert polled.count == 2 and len(ids) == 2
    assert await b.ack("q", "g", "c1", ids[:1]) == 1
    assert await b.nack("q", "g", "c1", ids[1:], 5) == 1
    lease = await cluster.md.leases.owner(group_resource("q", "g"))
    assert lease is not None and lease.node_id == owner_id  # still served by the owner
    await b.leave("q", "g", "c1")
    with pytest.raises(NotFound) as info:
        await b.poll("q", "g", "c1", 10, 0)  # the read node's own 404 passes through
    assert info.value.code == "consumer_not_found"
    assert "vpq_consumer_forwards_total 1" in await b.metrics_text()  # the owner was remembered after the first


async def test_unreachable_read_node_fails_over(cluster: Cluster) -> None:
    await cluster.add_writer()
    await cluster.add_reader("r1")
    await cluster.md.nodes.register_node("dead", "read", nowhere(), 60_000)
    b = cluster.backend
    await b.put_queue("q", {})
    group = next(f"g{i}" for i in range(1000) if rendezvous_pick(group_key("q", f"g{i}"), ["r1", "dead"]) == "dead")
    joined = await b.join("q", group, JoinSpec(None))
    assert joined["consumer_id"]
    lease = await cluster.md.leases.owner(group_resource("q", group))
    assert lease is not None and lease.node_id == "r1"  # r1 serves the group
    assert "vpq_consumer_failovers_total 1" in await b.metrics_text()


async def test_owner_not_live_is_retryable(cluster: Cluster) -> None:
    await cluster.add_writer()
    await cluster.add_reader("r1")
    await cluster.backend.put_queue("q", {})
    await cluster.md.groups.join("q", "g", "c-elsewhere", IsolationContext(), 60_000)
    assert await cluster.md.leases.acquire(group_resource("q", "g"), "vanished", 60_000) is not None
    with pytest.raises(Unavailable) as info:
        await cluster.backend.group_info("q", "g")
    assert info.value.code == "group_moving" and info.value.retryable


async def test_cluster_and_map_views(cluster: Cluster) -> None:
    await cluster.add_writer()
    await cluster.add_reader("r1")
    b = cluster.backend
    await b.put_queue("q", {"virtual_partitions": 2})
    await b.produce("q", batch(msg("a", 1), msg("b", 2), msg("c", 3)))
    view = await b.cluster()
    assert [n["id"] for n in view["write_nodes"]] == ["w1"] and view["write_nodes"][0]["reachable"]
    assert [n["id"] for n in view["read_nodes"]] == ["r1"]
    assert view["epoch"] == 1
    parts = {p["id"]: p for p in view["physical_partitions"]}
    assert sorted(parts) == [0, 1] and all(p["owner"] == "w1" and p["online"] for p in parts.values())
    assert sum(p["end_offset"] for p in parts.values()) == 3
    assert await b.current_map() == await cluster.md.maps.current()
    await b.delete_queue("q")
    assert (await b.current_map())["queues"] == {}


async def test_through_the_gateway_app(cluster: Cluster) -> None:
    await cluster.add_writer()
    await cluster.add_reader("r1")
    app = create_app(cluster.settings.gateway, cluster.backend, queue_defaults=cluster.settings.queues, manage_backend=False)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        assert (await client.get("/readyz")).status == 200
        resp = await client.put("/v1/queues/web", json={"virtual_partitions": 2})
        assert resp.status == 201
        resp = await client.post(
            "/v1/queues/web/messages",
            json={"messages": [{"key": "k", "value": {"a": 1}}, {"value_b64": "AAE="}]},
            headers={"X-Lane": "feat-a"},
        )
        assert resp.status == 200, await resp.text()
        results = (await resp.json())["results"]
        assert len(results) == 2
        resp = await client.post("/v1/queues/nope/messages", json={"messages": [{"value": 1}]})
        assert resp.status == 404 and (await resp.json())["error"]["code"] == "queue_not_found"
        assert (await client.get("/v1/maps/current")).status == 200
        assert "vpq_produce_messages_total 2" in await (await client.get("/metrics")).text()
    finally:
        await client.close()
