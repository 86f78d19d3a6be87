"""ReadNodeClient against a fake read node that records every call."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from aiohttp import web

from tests.gateway.cluster_fakes import FakeReadNode
from vpq.common.errors import Conflict, InternalError, NotFound, Unavailable
from vpq.common.poll_body import PolledBody
from vpq.node_rpc.read_node_client import ReadNodeClient


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
async def node() -> AsyncIterator[FakeReadNode]:
    n = FakeReadNode()
    await n.start()
    yield n
    await n.stop()


async def test_every_endpoint_uses_the_documented_path_and_body(session, node) -> None:
    c = ReadNodeClient(session)
    a = node.address
    joined = await c.join(a, "orders", "billing", consumer_id=None, env="test", set_="eu", lane="feat-a", start="latest")
    cid = joined["consumer_id"]
    assert joined["session_timeout_ms"] == 10000
    assert await c.poll(a, "orders", "billing", cid, max_messages=7, wait_ms=99_999) == []
    assert await c.ack(a, "orders", "billing", cid, ["0-1", "0-2"]) == 2
    assert await c.nack(a, "orders", "billing", cid, ["0-3"], delay_ms=50) == 1
    info = await c.group_info(a, "orders", "billing")
    assert info["group"] == "billing" and info["lag"]["total"] == 0
    assert await c.leave(a, "orders", "billing", cid) is None
    base = "/internal/v1/queues/orders/groups/billing"
    assert node.calls == [
        ("POST", f"{base}/consumers", {"consumer_id": None, "env": "test", "set": "eu", "lane": "feat-a", "start": "latest"}),
        ("POST", f"{base}/consumers/{cid}/poll", {"max_messages": 7, "wait_ms": 30000}),
        ("POST", f"{base}/consumers/{cid}/ack", {"ids": ["0-1", "0-2"]}),
        ("POST", f"{base}/consumers/{cid}/nack", {"ids": ["0-3"], "delay_ms": 50}),
        ("GET", base, None),
        ("DELETE", f"{base}/consumers/{cid}", None),
    ]


async def test_not_owner_carries_the_owner(session, node) -> None:
    node.not_owner = "r7"
    with pytest.raises(Conflict) as info:
        await ReadNodeClient(session).group_info(node.address, "q", "g")
    assert info.value.code == "not_owner" and info.value.details["owner"] == "r7"


async def test_unknown_consumer_is_not_found(session, node) -> None:
    with pytest.raises(NotFound) as info:
        await ReadNodeClient(session).ack(node.address, "q", "g", "nobody", ["0-1"])
    assert info.value.code == "consumer_not_found"


async def test_unreachable_read_node(session) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(Unavailable) as info:
        await ReadNodeClient(session).poll(address, "q", "g", "c", 1, 0)
    assert info.value.code == "node_unreachable" and info.value.details["role"] == "read"
    assert address in info.value.message


async def _poll_server(body: bytes, headers: dict[str, str]) -> tuple[web.AppRunner, str]:
    async def poll(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="application/json", headers=headers)

    app = web.Application()
    app.router.add_post("/internal/v1/queues/{q}/groups/{g}/consumers/{c}/poll", poll)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"127.0.0.1:{port}"


@pytest.mark.parametrize("header", [{"X-Vpq-Messages": "2"}, {}, {"X-Vpq-Messages": "two"}])
async def test_poll_body_passes_the_answer_through_with_its_count(session, header) -> None:
    body = orjson.dumps({"messages": [{"id": "0-1"}, {"id": "0-2"}]})
    runner, address = await _poll_server(body, header)
    try:
        c = ReadNodeClient(session)
        polled = await c.poll_body(address, "q", "g", "c", 10, 0)
        assert polled == PolledBody(body, 2)  # counted from the header, else from the parsed body
        assert [m["id"] for m in await c.poll(address, "q", "g", "c", 10, 0)] == ["0-1", "0-2"]
    finally:
        await runner.cleanup()


async def test_poll_body_without_a_message_list_is_a_bad_answer(session) -> None:
    runner, address = await _poll_server(b'{"nothing": 1}', {})
    try:
        with pytest.raises(InternalError) as info:
            await ReadNodeClient(session).poll_body(address, "q", "g", "c", 10, 0)
        assert info.value.code == "bad_node_answer"
    finally:
        await runner.cleanup()
