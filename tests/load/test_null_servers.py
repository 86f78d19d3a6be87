"""The no-work stand-ins of ``vpq bench ceiling`` as real servers on free ports; where a
test needs to see what reached the null node, or make it slow or failing, the real
null node sits behind a recording proxy (``tests/recording_proxy.py``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import orjson
import pytest
from aiohttp import web

from tests.recording_proxy import RecordingProxy
from vpq.common.redis_server import free_port
from vpq.load.null_servers import NODE_ANSWER, Forwarder, create_gateway_app, create_node_app, produce_answer


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def _proxied_node() -> tuple[RecordingProxy, list[web.AppRunner], str]:
    """The real null node behind a recording proxy: (proxy, runners, the proxy's URL)."""
    node_runner, node_url = await _serve(create_node_app())
    proxy = RecordingProxy(node_url)
    proxy_runner, proxy_url = await _serve(proxy.app())
    return proxy, [proxy_runner, node_runner], proxy_url


def bodies(proxy: RecordingProxy) -> list[bytes]:
    """The bodies of the appends that reached the node, in arrival order."""
    return [r.body for r in proxy.requests_to("POST", "/append")]


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
    node, runners, node_url = await _proxied_node()
    node.delay(r"/append$", 0.05)  # each body is recorded on arrival, then held
    gw_runner, gw_url = await _serve(create_gateway_app(node_url + "/append", batch=1))
    try:
        async def one(i: int) -> int:
            async with session.post(gw_url + "/v1/queues/q/messages", data=f"<{i}>".encode()) as resp:
                await resp.read()
                return resp.status

        first = asyncio.create_task(one(0))
        while not bodies(node):  # the first body is at the node, which holds its answer
            await asyncio.sleep(0.005)
        assert await asyncio.gather(*(one(i) for i in range(1, 10))) == [200] * 9
        assert await first == 200
        # one request in flight: the nine bodies that arrived meanwhile went together
        got = bodies(node)
        assert len(got) == 2 and got[0] == b"<0>"
        assert sorted(got[1].decode().replace("><", ">|<").split("|")) == sorted(f"<{i}>" for i in range(1, 10))
    finally:
        await gw_runner.cleanup()
        for runner in runners:
            await runner.cleanup()


async def test_forwarder_hands_a_node_error_to_the_waiters(session: aiohttp.ClientSession) -> None:
    node, runners, url = await _proxied_node()
    node.fail("POST", r"/append$", 503, "unavailable", times=100)
    try:
        fwd = Forwarder(session, url + "/append")
        results = await asyncio.gather(fwd.send(b"a"), fwd.send(b"b"), return_exceptions=True)
        assert all(isinstance(r, aiohttp.ClientResponseError) and r.status == 503 for r in results)
        assert await asyncio.gather(fwd.send(b"c"), return_exceptions=True) != [None]  # still refused, not stuck
    finally:
        for runner in runners:
            await runner.cleanup()
