"""ReadNodeClient against a real read node (a live platform's, ``tests/live_platform.py``),
through a recording proxy (``tests/recording_proxy.py``) where a test checks the wire
format, and to rewrite its answers into what a healthy node never says."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator

import aiohttp
import orjson
import pytest
from aiohttp.test_utils import TestServer

from tests.live_platform import LivePlatform, platform_settings, running
from tests.recording_proxy import RecordingProxy, Rewrite
from vpq.common.errors import Conflict, InternalError, NotFound, Unavailable
from vpq.isolation.context import IsolationContext
from vpq.metadata.leases import group_resource
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.read_node_client import ReadNodeClient


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivePlatform]:
    with running(platform_settings(tmp_path_factory.mktemp("read-client"))) as live:
        yield live


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
async def queue(platform: LivePlatform, session: aiohttp.ClientSession) -> str:
    name = f"orders-{uuid.uuid4().hex[:8]}"
    async with session.put(f"{platform.url}/v1/queues/{name}", json={"virtual_partitions": 1}) as r:
        assert r.status == 201, await r.text()
    return name


@pytest.fixture
async def node(platform: LivePlatform) -> AsyncIterator[tuple[RecordingProxy, str]]:
    """The platform's read node ``r0`` behind a recording proxy: (proxy, proxy address)."""
    proxy = RecordingProxy(f"http://{platform.readers[0].address}")
    server = TestServer(proxy.app(), host="127.0.0.1")
    await server.start_server()
    yield proxy, f"127.0.0.1:{server.port}"
    await server.close()


async def test_every_endpoint_uses_the_documented_path_and_body(session, pools, platform: LivePlatform, queue: str, node) -> None:
    proxy, a = node
    c = ReadNodeClient(session, pools=pools)
    joined = await c.join(a, queue, "billing", consumer_id=None, env="test", set_="eu", lane="feat-a", start="latest")
    cid = joined["consumer_id"]
    assert joined["session_timeout_ms"] == 10000
    messages = [{"key": "k", "value": i} for i in range(3)]
    headers = {"X-Env": "test", "X-Set": "eu", "X-Lane": "feat-a"}
    async with session.post(f"{platform.url}/v1/queues/{queue}/messages", json={"messages": messages}, headers=headers) as r:
        assert r.status == 200, await r.text()
    polled = await c.poll(a, queue, "billing", cid, max_messages=7, wait_ms=99_999)  # clamped to 30 s; comes at once
    ids = [m["id"] for m in polled]
    assert [m["value"] for m in polled] == [0, 1, 2]
    assert await c.ack(a, queue, "billing", cid, ids[:2]) == 2
    assert await c.nack(a, queue, "billing", cid, ids[2:], delay_ms=50) == 1
    info = await c.group_info(a, queue, "billing")
    assert info["group"] == "billing" and info["lag"]["total"] == 1
    assert [(m["consumer_id"], m["env"], m["set"], m["lane"]) for m in info["members"]] == [(cid, "test", "eu", "feat-a")]
    assert await c.leave(a, queue, "billing", cid) is None
    base = f"/internal/v1/queues/{queue}/groups/billing"
    assert [(r.method, r.path, r.body) for r in proxy.requests] == [
        ("POST", f"{base}/consumers", {"consumer_id": None, "env": "test", "set": "eu", "lane": "feat-a", "start": "latest"}),
        ("POST", f"{base}/consumers/{cid}/poll", {"max_messages": 7, "wait_ms": 30000}),
        ("POST", f"{base}/consumers/{cid}/ack", {"ids": ids[:2]}),
        ("POST", f"{base}/consumers/{cid}/nack", {"ids": ids[2:], "delay_ms": 50}),
        ("GET", base, None),
        ("DELETE", f"{base}/consumers/{cid}", None),
    ]


async def test_not_owner_carries_the_owner(session, platform: LivePlatform, queue: str) -> None:
    md = MetadataStore(platform.settings.redis, url=platform.redis_url)
    await md.start()
    try:
        await md.groups.join(queue, "g", "c-of-r7", IsolationContext(), 60_000)  # the group exists,
        assert await md.leases.acquire(group_resource(queue, "g"), "r7", 60_000) is not None  # r7 holds it
    finally:
        await md.stop()
    with pytest.raises(Conflict) as info:
        await ReadNodeClient(session).group_info(platform.readers[0].address, queue, "g")
    assert info.value.code == "not_owner" and info.value.details["owner"] == "r7"


async def test_unknown_consumer_is_not_found(session, platform: LivePlatform, queue: str) -> None:
    c = ReadNodeClient(session)
    address = platform.readers[0].address
    await c.join(address, queue, "g", consumer_id="somebody", env="prod", set_="", lane="", start="earliest")
    with pytest.raises(NotFound) as info:
        await c.ack(address, queue, "g", "nobody", ["0-1"])
    assert info.value.code == "consumer_not_found"


async def test_unreachable_read_node(session, pools) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(Unavailable) as info:
        await ReadNodeClient(session, pools=pools).poll(address, "q", "g", "c", 1, 0)
    assert info.value.code == "node_unreachable" and info.value.details["role"] == "read"
    assert address in info.value.message


def count_header(value: str | None) -> Rewrite:
    """An answer rewrite that sets ``X-Vpq-Messages`` to ``value`` (drops it for None)."""

    def rewrite(status: int, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        out = {k: v for k, v in headers.items() if k.lower() != "x-vpq-messages"}
        if value is not None:
            out["X-Vpq-Messages"] = value
        return status, out, body

    return rewrite


async def two_messages(session: aiohttp.ClientSession, platform: LivePlatform, queue: str, a: str) -> tuple[str, list[str]]:
    """A consumer of group "g" joined through ``a`` and the ids of 2 messages produced."""
    c = ReadNodeClient(session)
    cid = (await c.join(a, queue, "g", consumer_id=None, env="prod", set_="", lane="", start="earliest"))["consumer_id"]
    async with session.post(f"{platform.url}/v1/queues/{queue}/messages", json={"messages": [{"value": 1}, {"value": 2}]}) as r:
        assert r.status == 200, await r.text()
        return cid, [m["id"] for m in (await r.json())["results"]]


@pytest.mark.parametrize("header", ["2", None, "two"])
async def test_poll_body_passes_the_answer_through_with_its_count(session, pools, platform: LivePlatform, queue: str, node, header) -> None:
    """The real answer, its count header kept, dropped or made unusable by the proxy."""
    proxy, a = node
    proxy.rewrite(r"/poll$", count_header(header))
    cid, ids = await two_messages(session, platform, queue, a)
    c = ReadNodeClient(session, pools=pools)
    polled = await c.poll_body(a, queue, "g", cid, 10, 5000)
    assert polled.count == 2  # counted from the header, else from the parsed body
    assert [m["id"] for m in orjson.loads(polled.body)["messages"]] == ids
    assert await c.nack(a, queue, "g", cid, ids, delay_ms=0) == 2
    assert [m["id"] for m in await c.poll(a, queue, "g", cid, 10, 5000)] == ids


async def test_poll_body_without_a_message_list_is_a_bad_answer(session, pools, platform: LivePlatform, queue: str, node) -> None:
    proxy, a = node
    proxy.rewrite(r"/poll$", lambda status, headers, body: (status, count_header(None)(status, headers, body)[1], b'{"nothing": 1}'))
    cid, _ = await two_messages(session, platform, queue, a)
    with pytest.raises(InternalError) as info:
        await ReadNodeClient(session, pools=pools).poll_body(a, queue, "g", cid, 10, 5000)
    assert info.value.code == "bad_node_answer"


async def test_poll_acks_its_ack_ids_first_and_counts_them(session, pools, platform: LivePlatform, queue: str, node) -> None:
    proxy, a = node
    cid, ids = await two_messages(session, platform, queue, a)
    c = ReadNodeClient(session, pools=pools)
    first = await c.poll_body(a, queue, "g", cid, 1, 5000)  # one vp, no keys: the first message
    assert first.count == 1 and first.acked == 0
    second = await c.poll_body(a, queue, "g", cid, 10, 5000, ack=[ids[0], "9-999999"])
    assert second.count == 1 and second.acked == 1
    assert [m["id"] for m in orjson.loads(second.body)["messages"]] == ids[1:]
    assert [r.body for r in proxy.requests if r.path.endswith("/poll")] == [
        {"max_messages": 1, "wait_ms": 5000},
        {"max_messages": 10, "wait_ms": 5000, "ack": [ids[0], "9-999999"]},
    ]
    assert await c.ack(a, queue, "g", cid, ids) == 1  # the first one was acked by the poll
