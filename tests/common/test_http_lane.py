"""``LaneSite``: a lane in front of a real aiohttp app on a free port, driven over raw
sockets (pipelining, split packets, hand-over) and by aiohttp's own client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from vpq.common.http1 import RequestHead
from vpq.common.http_lane import LaneAnswer, LaneSite

pytestmark = pytest.mark.timeout(30)


class EchoLane:
    """Takes ``POST /lane...`` unless the body is ``decline``; a body ``wait`` waits for
    ``release``. ``finished`` counts the lane requests that ran to their end."""

    max_body_bytes = 1024

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.finished = 0

    def wants(self, head: RequestHead) -> bool:
        return head.method == "POST" and head.target.startswith("/lane")

    def take(self, head: RequestHead, body: bytes) -> Coroutine[Any, Any, LaneAnswer] | None:
        if body == b"decline":
            return None
        return self._answer(body)

    async def _answer(self, body: bytes) -> LaneAnswer:
        if body == b"wait":
            await self.release.wait()
        self.finished += 1
        return LaneAnswer(201, b"lane:" + body, "text/plain", [("X-Lane", "1")])


async def _app_echo(request: web.Request) -> web.Response:
    return web.Response(status=200, body=b"app:" + await request.read(), content_type="text/plain")


@pytest.fixture
async def served() -> AsyncIterator[tuple[EchoLane, int, web.AppRunner]]:
    app = web.Application()
    app.router.add_post("/lane", _app_echo)
    app.router.add_get("/other", _app_echo)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    lane = EchoLane()
    site = LaneSite(runner, lane, host="127.0.0.1", port=0, shutdown_timeout_s=5.0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield lane, port, runner
    finally:
        lane.release.set()
        await runner.cleanup()


def post(body: bytes, extra: str = "", path: str = "/lane") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    lines = head.split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return status, headers, body


async def test_keep_alive_requests_stay_in_the_lane(served: tuple[EchoLane, int, web.AppRunner]) -> None:
    lane, port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for i in range(3):
        writer.write(post(f"m{i}".encode()))
        status, headers, body = await read_answer(reader)
        assert (status, body, headers["x-lane"]) == (201, f"lane:m{i}".encode(), "1")
    assert lane.finished == 3
    writer.close()


async def test_pipelined_answers_keep_request_order(served: tuple[EchoLane, int, web.AppRunner]) -> None:
    _, port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(b"a") + post(b"b") + post(b"decline") + post(b"c"))
    answers = [await read_answer(reader) for _ in range(4)]
    # the declined request and everything after it on the connection are aiohttp's
    assert [(s, b) for s, _, b in answers] == [(201, b"lane:a"), (201, b"lane:b"), (200, b"app:decline"), (200, b"app:c")]
    writer.close()


async def test_a_head_or_body_split_over_packets(served: tuple[EchoLane, int, web.AppRunner]) -> None:
    _, port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    raw = post(b"split-body")
    for cut in (5, 30, len(raw) - 3):
        writer.write(raw[:cut])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(raw[cut:])
        status, _, body = await read_answer(reader)
        assert (status, body) == (201, b"lane:split-body"), cut
    writer.close()


async def test_a_body_in_several_pieces_then_the_next_request(served: tuple[EchoLane, int, web.AppRunner]) -> None:
    _, port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    first = post(b"x" * 600)
    raw = first + post(b"next")
    for piece in (raw[:60], raw[60:300], raw[300 : len(first) - 1], raw[len(first) - 1 :]):
        writer.write(piece)
        await writer.drain()
        await asyncio.sleep(0.02)
    assert [(s, b) for s, _, b in [await read_answer(reader), await read_answer(reader)]] == [
        (201, b"lane:" + b"x" * 600),
        (201, b"lane:next"),
    ]
    writer.close()


@pytest.mark.parametrize(
    "raw",
    [
        b"POST /lane HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        b"POST /lane HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc",
        b"GET /other HTTP/1.1\r\nHost: t\r\n\r\n",
    ],
)
async def test_what_the_lane_does_not_take_goes_to_aiohttp(
    served: tuple[EchoLane, int, web.AppRunner], raw: bytes
) -> None:
    lane, port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    status, _, body = await read_answer(reader)
    assert status == 200 and body.startswith(b"app:")
    assert lane.finished == 0
    writer.close()


async def test_an_oversized_body_goes_to_aiohttp(served: tuple[EchoLane, int, web.AppRunner]) -> None:
    lane, port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(b"x" * 2000))
    status, _, body = await read_answer(reader)
    assert (status, body) == (200, b"app:" + b"x" * 2000) and lane.finished == 0
    writer.close()


async def test_connection_close_is_honoured(served: tuple[EchoLane, int, web.AppRunner]) -> None:
    _, port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(b"bye", "Connection: close\r\n"))
    status, headers, body = await read_answer(reader)
    assert (status, body, headers["connection"]) == (201, b"lane:bye", "close")
    assert await reader.read() == b""  # the server closed it
    writer.close()


async def test_a_lane_request_runs_to_its_end_when_the_client_leaves(
    served: tuple[EchoLane, int, web.AppRunner],
) -> None:
    lane, port, _ = served
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(b"wait"))
    await writer.drain()
    await asyncio.sleep(0.1)
    writer.close()
    await asyncio.sleep(0.1)
    assert lane.finished == 0
    lane.release.set()
    for _ in range(50):
        if lane.finished:
            break
        await asyncio.sleep(0.02)
    assert lane.finished == 1


async def test_cleanup_waits_for_lane_requests_in_flight(served: tuple[EchoLane, int, web.AppRunner]) -> None:
    lane, port, runner = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(b"wait"))
    await writer.drain()
    await asyncio.sleep(0.1)
    cleanup = asyncio.create_task(runner.cleanup())
    await asyncio.sleep(0.2)
    assert not cleanup.done()
    lane.release.set()
    status, _, body = await read_answer(reader)
    assert (status, body) == (201, b"lane:wait")
    await asyncio.wait_for(cleanup, 5)
    writer.close()


async def test_aiohttp_clients_get_both_kinds_of_answer(served: tuple[EchoLane, int, web.AppRunner]) -> None:
    _, port, _ = served
    async with aiohttp.ClientSession() as session:
        for body, expected in ((b"one", b"lane:one"), (b"two", b"lane:two"), (b"decline", b"app:decline")):
            async with session.post(f"http://127.0.0.1:{port}/lane", data=body) as r:
                assert await r.read() == expected
        async with session.get(f"http://127.0.0.1:{port}/other") as r:
            assert r.status == 200


async def test_a_half_closed_client_gets_its_answers(served: tuple[EchoLane, int, web.AppRunner]) -> None:
    _, port, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post(b"one") + post(b"two"))
    writer.write_eof()
    assert [(s, b) for s, _, b in [await read_answer(reader), await read_answer(reader)]] == [
        (201, b"lane:one"),
        (201, b"lane:two"),
    ]
    assert await reader.read() == b""  # closed once answered
    writer.close()
