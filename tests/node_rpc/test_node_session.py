"""``node_session``: calls that wait on a node (long polls) never make other calls to
that node wait for a connection. Against a stub read node whose polls hang until
released: with more polls outstanding than any usual per-host pool size (256), a join
is still answered; then the polls are released and all answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from vpq.node_rpc.call import node_session
from vpq.node_rpc.read_node_client import ReadNodeClient

OUTSTANDING = 300


class StubNode:
    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.waiting = 0

    def app(self) -> web.Application:
        app = web.Application()
        base = "/internal/v1/queues/{queue}/groups/{group}/consumers"
        app.router.add_post(base, self.join)
        app.router.add_post(base + "/{consumer_id}/poll", self.poll)
        return app

    async def join(self, request: web.Request) -> web.Response:
        return web.json_response({"consumer_id": "c-new", "session_timeout_ms": 10000})

    async def poll(self, request: web.Request) -> web.Response:
        self.waiting += 1
        await self.release.wait()
        return web.Response(body=orjson.dumps({"messages": []}), content_type="application/json",
                            headers={"X-Vpq-Messages": "0"})


@pytest.fixture
async def stub() -> AsyncIterator[tuple[StubNode, str]]:
    node = StubNode()
    server = TestServer(node.app(), host="127.0.0.1")
    await server.start_server()
    yield node, f"127.0.0.1:{server.port}"
    node.release.set()
    await server.close()


async def test_a_join_is_served_while_hundreds_of_long_polls_wait(stub: tuple[StubNode, str]) -> None:
    node, address = stub
    async with node_session() as session:
        client = ReadNodeClient(session)
        polls = [
            asyncio.ensure_future(client.poll(address, "q", "g", f"c{i}", max_messages=10, wait_ms=30_000))
            for i in range(OUTSTANDING)
        ]
        async with asyncio.timeout(30):  # a liveness bound, not a speed one: a capped pool never gets here
            while node.waiting < OUTSTANDING:
                await asyncio.sleep(0.01)
            joined = await client.join(address, "q", "g", consumer_id=None, env="", set_="", lane="")
        assert joined["consumer_id"] == "c-new"
        assert not any(p.done() for p in polls)
        node.release.set()
        assert await asyncio.gather(*polls) == [[] for _ in range(OUTSTANDING)]
