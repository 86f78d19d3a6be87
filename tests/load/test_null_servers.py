"""The no-work stand-ins of ``vpq bench ceiling`` as real servers on free ports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from aiohttp import web

from vpq.common.redis_server import free_port
from vpq.load.null_servers import NODE_ANSWER, Forwarder, create_gateway_app, create_node_app, produce_answer


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


class CountingNode:
    """A node app that records every body it gets (to see what the gateway forwarded)."""

    def __init__(self, delay_s: float = 0.0, status: int = 200) -> None:
        self.bodies: list[bytes] = []
        self.delay_s = delay_s
        self.status = status

    def app(self) -> web.Application:
        async def append(request: web.Request) -> web.Response:
            self.bodies.append(await request.read())
            await asyncio.sleep(self.delay_s)
            return web.Response(status=self.status, body=NODE_ANSWER, content_type="application/json")

        app = web.Application()
        app.router.add_post("/append", append)
        return app


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def test_produce_answer_has_the_api_shape() -> None:
    body = orjson.loads(produce_answer(3))
    assert [set(r) for r in body["results"]] == [{"id", "partition", "offset", "virtual_partition"}] * 3
    assert len({r["id"] for r in body["results"]}) == 3


async def test_node_reads_the_body_and_answers(session: aiohttp.ClientSession) -> None:
    runner, url = await _serve(create_node_app())
    try:
        async with session.post(url + "/append", data=b"x" * 300_000) as resp:
            assert resp.status == 200 and await resp.read() == NODE_ANSWER
    finally:
        await runner.cleanup()


async def test_one_hop_gateway_answers_batch_results(session: aiohttp.ClientSession) -> None:
    runner, url = await _serve(create_gateway_app(None, batch=5))
    try:
        async with session.post(url + "/v1/queues/q/messages", data=b'{"messages": []}') as resp:
            assert resp.status == 200
            assert len((await resp.json())["results"]) == 5
    finally:
        await runner.cleanup()


async def test_two_hop_gateway_forwards_every_body_and_joins_those_that_wait(session: aiohttp.ClientSession) -> None:
    node = CountingNode(delay_s=0.05)
    node_runner, node_url = await _serve(node.app())
    gw_runner, gw_url = await _serve(create_gateway_app(node_url + "/append", batch=1))
    try:
        async def one(i: int) -> int:
            async with session.post(gw_url + "/v1/queues/q/messages", data=f"<{i}>".encode()) as resp:
                await resp.read()
                return resp.status

        first = asyncio.create_task(one(0))
        while not node.bodies:  # the first body is at the node, which holds its answer
            await asyncio.sleep(0.005)
        assert await asyncio.gather(*(one(i) for i in range(1, 10))) == [200] * 9
        assert await first == 200
        # one request in flight: the nine bodies that arrived meanwhile went together
        assert len(node.bodies) == 2 and node.bodies[0] == b"<0>"
        assert sorted(node.bodies[1].decode().replace("><", ">|<").split("|")) == sorted(f"<{i}>" for i in range(1, 10))
    finally:
        await gw_runner.cleanup()
        await node_runner.cleanup()


async def test_forwarder_hands_a_node_error_to_the_waiters(session: aiohttp.ClientSession) -> None:
    node = CountingNode(status=503)
    runner, url = await _serve(node.app())
    try:
        fwd = Forwarder(session, url + "/append")
        results = await asyncio.gather(fwd.send(b"a"), fwd.send(b"b"), return_exceptions=True)
        assert all(isinstance(r, aiohttp.ClientResponseError) and r.status == 503 for r in results)
        assert await asyncio.gather(fwd.send(b"c"), return_exceptions=True) != [None]  # still refused, not stuck
    finally:
        await runner.cleanup()
