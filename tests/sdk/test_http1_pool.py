"""AsyncClient over its own HTTP/1.1 pool (``sdk.http1_pool``) against real servers on
free ports: an aiohttp app, and a raw asyncio server for what aiohttp would not do
(dropping a kept-alive connection as a request arrives)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import orjson
import pytest
import uvloop
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.sdk.conftest import RecordingSleep
from vpq.sdk.client import AsyncClient
from vpq.sdk.errors import (
    ClientClosedError,
    GatewayConnectionError,
    GatewayTimeoutError,
    NotFoundError,
    UnavailableError,
)
from vpq.sdk.http1_pool import Http1Pool
from vpq.sdk.retry import NO_RETRY, RetryPolicy


@dataclass
class Seen:
    """What the aiohttp app saw: each request's client port, headers and path."""

    ports: list[int] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    slow: asyncio.Event = field(default_factory=asyncio.Event)


def app(seen: Seen) -> web.Application:
    async def note(request: web.Request) -> None:
        seen.ports.append(request.transport.get_extra_info("peername")[1])  # type: ignore[union-attr]
        seen.headers.append(dict(request.headers))
        seen.paths.append(request.path)

    async def echo(request: web.Request) -> web.Response:
        await note(request)
        body = await request.read()
        return web.json_response({"method": request.method, "body": body.decode(), "query": dict(request.query)})

    async def close(request: web.Request) -> web.Response:
        await note(request)
        return web.json_response({"closed": True}, headers={"Connection": "close"})

    async def slow(request: web.Request) -> web.Response:
        await note(request)
        try:
            await asyncio.sleep(30)
        finally:
            seen.slow.set()  # the client went away
        return web.json_response({})

    async def chunked(request: web.Request) -> web.StreamResponse:
        await note(request)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for piece in (b'{"results": [', b"1, 2, ", b"3]}"):
            await resp.write(piece)
        await resp.write_eof()
        return resp

    async def fail(request: web.Request) -> web.Response:
        await note(request)
        status = int(request.match_info["status"])
        headers = {"Retry-After": request.query["retry_after"]} if "retry_after" in request.query else None
        error = {"error": {"code": f"c{status}", "message": f"failed {status}", "extra": 1}}
        return web.json_response(error, status=status, headers=headers)

    async def empty(request: web.Request) -> web.Response:
        await note(request)
        return web.Response(status=204)

    async def text(request: web.Request) -> web.Response:
        await note(request)
        return web.Response(text="# HELP x\nx 1\n")

    a = web.Application()
    a.router.add_route("*", "/echo", echo)
    a.router.add_route("*", "/base/v1/echo", echo)
    a.router.add_get("/close", close)
    a.router.add_route("*", "/slow", slow)
    a.router.add_get("/chunked", chunked)
    a.router.add_route("*", "/fail/{status}", fail)
    a.router.add_delete("/empty", empty)
    a.router.add_get("/text", text)
    a.router.add_route("*", "/v1/queues/{queue}/messages", echo)
    return a


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
async def server(seen: Seen) -> AsyncIterator[TestServer]:
    srv = TestServer(app(seen))
    await srv.start_server()
    yield srv
    await srv.close()


def url_of(server: TestServer) -> str:
    return str(server.make_url("")).rstrip("/")


def pool_of(client: AsyncClient) -> Http1Pool:
    pool = client._pool
    assert pool is not None
    return pool


async def test_keep_alive_reuses_one_connection(server: TestServer, seen: Seen) -> None:
    async with AsyncClient(url_of(server), token="tok") as c:
        for i in range(5):
            _, body = await c.request("POST", "/echo", {"i": i})
            assert body == {"method": "POST", "body": f'{{"i":{i}}}', "query": {}}
        assert (await c.request("GET", "/echo?a=1"))[1]["query"] == {"a": "1"}
        assert len(set(seen.ports)) == 1
        assert pool_of(c).size == 1 and pool_of(c).idle == 1
    first = seen.headers[0]
    assert first["User-Agent"] == "vpq-sdk/0.1" and first["Accept"] == "application/json"
    assert first["Authorization"] == "Bearer tok" and first["Content-Type"] == "application/json"
    assert first["Host"] == url_of(server).removeprefix("http://")
    assert "Content-Type" not in seen.headers[-1]  # no body, no content type


async def test_connections_are_bounded_and_shared(server: TestServer, seen: Seen) -> None:
    async with AsyncClient(url_of(server), max_connections=2) as c:
        answers = await asyncio.gather(*(c.request("POST", "/echo", {"n": n}) for n in range(12)))
        assert sorted(orjson.loads(body["body"])["n"] for _, body in answers) == list(range(12))
        assert len(set(seen.ports)) <= 2 and pool_of(c).size <= 2


async def test_a_request_waiting_for_a_connection_gets_the_freed_slot(server: TestServer, seen: Seen) -> None:
    async with AsyncClient(url_of(server), max_connections=1, timeout=0.2, retry=NO_RETRY) as c:
        slow = asyncio.create_task(c.request("GET", "/slow"))
        while not seen.paths:
            await asyncio.sleep(0.01)
        waiting = asyncio.create_task(c.request("GET", "/echo", extra_timeout=10))
        with pytest.raises(GatewayTimeoutError):
            await slow
        assert (await waiting)[1]["method"] == "GET"  # took the slot the timed-out one freed
        assert pool_of(c).size == 1 and seen.ports[0] != seen.ports[1]


async def test_base_path_is_kept(server: TestServer, seen: Seen) -> None:
    async with AsyncClient(url_of(server) + "/base/") as c:
        assert (await c.request("GET", "/v1/echo"))[1]["method"] == "GET"
    assert seen.paths == ["/base/v1/echo"]


async def test_connection_close_answer_is_not_reused(server: TestServer, seen: Seen) -> None:
    async with AsyncClient(url_of(server)) as c:
        assert (await c.request("GET", "/close"))[1] == {"closed": True}
        assert pool_of(c).size == 0
        await c.request("GET", "/echo")
        await c.request("GET", "/echo")
    assert seen.ports[0] != seen.ports[1] and seen.ports[1] == seen.ports[2]


async def test_chunked_answer_and_text_and_no_content(server: TestServer) -> None:
    async with AsyncClient(url_of(server)) as c:
        assert await c.request("GET", "/chunked") == (200, {"results": [1, 2, 3]})
        assert await c.request("GET", "/text") == (200, "# HELP x\nx 1\n")
        assert await c.request("DELETE", "/empty") == (204, {})
        assert await c.request("GET", "/chunked") == (200, {"results": [1, 2, 3]})
        assert pool_of(c).size == 1


async def test_errors_with_retry_after(server: TestServer, seen: Seen) -> None:
    sleeps = RecordingSleep()
    async with AsyncClient(url_of(server), retry=RetryPolicy(attempts=3), sleep=sleeps) as c:
        with pytest.raises(UnavailableError) as unavailable:
            await c.request("POST", "/fail/503?retry_after=2", {"x": 1})
        assert unavailable.value.retryable and unavailable.value.retry_after == 2.0
        assert (unavailable.value.code, unavailable.value.message, unavailable.value.details) == ("c503", "failed 503", {"extra": 1})
        assert sleeps.delays == [2.0, 2.0] and len(seen.paths) == 3
        with pytest.raises(NotFoundError) as missing:
            await c.request("GET", "/fail/404")
        assert missing.value.status == 404 and not missing.value.retryable and len(seen.paths) == 4
        assert pool_of(c).size == 1  # error answers keep the connection


async def test_timeout_closes_the_connection(server: TestServer, seen: Seen) -> None:
    async with AsyncClient(url_of(server), timeout=0.2, retry=NO_RETRY) as c:
        await c.request("GET", "/echo")
        with pytest.raises(GatewayTimeoutError) as exc:
            await c.request("POST", "/slow", {}, extra_timeout=0.1)
        assert exc.value.retryable and exc.value.code == "timeout" and exc.value.status is None
        assert exc.value.message == f"no answer from {url_of(server)} within 0.3s"
        assert pool_of(c).size == 0
        await asyncio.wait_for(seen.slow.wait(), 10)  # the server saw the connection go
        assert (await c.request("GET", "/echo"))[1]["method"] == "GET"
    assert seen.ports[0] == seen.ports[1] != seen.ports[2]


async def test_a_shorter_timeout_after_a_longer_one_still_expires_first(server: TestServer, seen: Seen) -> None:
    async with AsyncClient(url_of(server), timeout=0.2, retry=NO_RETRY) as c:
        long = asyncio.create_task(c.request("GET", "/slow", extra_timeout=60))
        while not seen.paths:
            await asyncio.sleep(0.01)
        with pytest.raises(GatewayTimeoutError):
            await c.request("GET", "/slow")
        assert not long.done()
        long.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long
        assert pool_of(c).size == 0


async def test_cancelled_request_closes_its_connection(server: TestServer, seen: Seen) -> None:
    async with AsyncClient(url_of(server)) as c:
        task = asyncio.create_task(c.request("GET", "/slow"))
        while not seen.paths:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool_of(c).size == 0
        await asyncio.wait_for(seen.slow.wait(), 10)
        assert (await c.request("GET", "/echo"))[1]["method"] == "GET"


async def test_refused_connection(dead_url: str) -> None:
    sleeps = RecordingSleep()
    async with AsyncClient(dead_url, retry=RetryPolicy(attempts=2), sleep=sleeps) as c:
        with pytest.raises(GatewayConnectionError) as exc:
            await c.request("POST", "/echo", {})
        assert (exc.value.code, exc.value.details, exc.value.retryable) == ("connection_refused", {"reason": "connection refused"}, True)
        assert exc.value.message == f"cannot connect to the gateway at {dead_url}: connection refused"
        assert len(sleeps.delays) == 1 and pool_of(c).size == 0


async def test_close_closes_every_connection(server: TestServer, seen: Seen) -> None:
    c = AsyncClient(url_of(server), max_connections=4)
    await asyncio.gather(*(c.request("GET", "/echo") for _ in range(4)))
    pool = pool_of(c)
    assert pool.size >= 1
    await c.close()
    assert pool.size == 0 and c._pool is None
    with pytest.raises(ClientClosedError):
        await c.request("GET", "/echo")


async def test_other_base_urls_go_through_aiohttp() -> None:
    for base in ("https://gw.example", "http://user:pw@gw.example:8080", "http://gw.example?x=1"):
        async with AsyncClient(base) as c:
            assert not c._uses_pool()
    async with AsyncClient("http://gw.example") as c:
        assert c._uses_pool()


# -- a server that drops kept-alive connections ----------------------------------------


@dataclass
class DroppingServer:
    """Answers the first request of each connection (keeping it alive), then closes the
    connection as soon as a second request arrives on it, without answering."""

    connections: int = 0
    requests: list[bytes] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for n in range(2):
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                self.requests.append(head.split(b" ", 2)[0])
                if n == 0:
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 8\r\n\r\n{\"n\": 1}")
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def serve_dropping(body: Callable[[str, DroppingServer], Awaitable[None]]) -> None:
    dropping = DroppingServer()
    srv = await asyncio.start_server(dropping.handle, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        await body(f"http://127.0.0.1:{port}", dropping)
    finally:
        srv.close()
        await srv.wait_closed()


async def test_dead_kept_alive_connection_is_retried_once_for_get() -> None:
    async def body(url: str, dropping: DroppingServer) -> None:
        async with AsyncClient(url, retry=NO_RETRY) as c:
            assert (await c.request("GET", "/a"))[1] == {"n": 1}
            assert (await c.request("GET", "/a"))[1] == {"n": 1}  # dropped, sent again on a new one
            assert dropping.connections == 2 and dropping.requests == [b"GET"] * 3

    await serve_dropping(body)


async def test_dead_kept_alive_connection_is_not_retried_for_post() -> None:
    async def body(url: str, dropping: DroppingServer) -> None:
        sleeps = RecordingSleep()
        async with AsyncClient(url, retry=NO_RETRY, sleep=sleeps) as c:
            assert (await c.request("POST", "/m", {"x": 1}))[1] == {"n": 1}
            with pytest.raises(GatewayConnectionError) as exc:
                await c.request("POST", "/m", {"x": 2})
            assert exc.value.code == "connection_error" and exc.value.retryable
            assert exc.value.message.startswith(f"connection to {url} failed: ")
            assert dropping.requests == [b"POST", b"POST"] and pool_of(c).size == 0
        async with AsyncClient(url, retry=RetryPolicy(attempts=2), sleep=sleeps) as c:  # the SDK's policy retries it
            await c.request("POST", "/m", {"x": 1})
            assert (await c.request("POST", "/m", {"x": 2}))[1] == {"n": 1}
            assert len(sleeps.delays) == 1 and dropping.requests == [b"POST"] * 5

    await serve_dropping(body)


async def test_a_body_given_as_buffers_is_sent_as_their_concatenation(server: TestServer, seen: Seen) -> None:
    host, port = server.host, server.port
    assert port is not None
    pool = Http1Pool(host, port, b"Host: x\r\n")
    try:
        body = [b'{"a":', bytearray(b"[1,2,"), b"3" * 300_000, b"]}"]
        answer = await pool.request("POST", "/echo", None, body, 5.0)
        assert answer.status == 200 and orjson.loads(answer.body)["body"] == b"".join(body).decode()
        assert seen.headers[-1]["Content-Length"] == str(sum(map(len, body)))
    finally:
        await pool.stop()


def test_on_uvloop() -> None:
    async def main() -> None:
        seen = Seen()
        runner = web.AppRunner(app(seen), handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            async with AsyncClient(f"http://127.0.0.1:{port}", max_connections=3, timeout=0.3, retry=NO_RETRY) as c:
                answers = await asyncio.gather(*(c.request("POST", "/echo", {"n": n}) for n in range(9)))
                assert len(answers) == 9 and pool_of(c).size <= 3
                assert await c.request("GET", "/chunked") == (200, {"results": [1, 2, 3]})
                with pytest.raises(GatewayTimeoutError):
                    await c.request("GET", "/slow")
                await asyncio.wait_for(seen.slow.wait(), 10)  # the server saw the connection go
                assert (await c.request("GET", "/echo"))[1]["method"] == "GET"
        finally:
            await runner.cleanup()

    uvloop.run(main())


async def test_produce_requests_have_connections_of_their_own(server: TestServer, seen: Seen) -> None:
    # a gateway answers produce requests in its fast lane only on connections that
    # carried nothing else (docs/internals.md)
    async with AsyncClient(url_of(server), max_connections=2) as c:
        for _ in range(3):
            await c.request("POST", "/v1/queues/q/messages", {"messages": [{"value": 1}]})
            await c.request("GET", "/echo")
            await c.request("GET", "/v1/queues/q/messages")  # not a produce: the other pool
        produce = {port for port, path, i in zip(seen.ports, seen.paths, range(9)) if i % 3 == 0}
        other = {port for port, path, i in zip(seen.ports, seen.paths, range(9)) if i % 3 != 0}
        assert len(produce) == 1 and len(other) == 1 and not produce & other
        assert c._produce_pool is not None and c._produce_pool.size == 1 and pool_of(c).size == 1
    assert c._produce_pool is None and c._pool is None
