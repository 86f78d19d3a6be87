"""``BurstServer`` and ``BurstSite``: every waiting connection is accepted in one wake, on
uvloop (the roles' loop, which accepts one per iteration by itself) and on asyncio."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import pytest
import uvloop
from aiohttp import web

from vpq.common.burst_accept import BurstServer, BurstSite, listen_sockets

pytestmark = pytest.mark.timeout(30)

BURST = 64


class Echo(asyncio.Protocol):
    """Echoes what it receives; records the loop iteration it started in."""

    def __init__(self, made: list[int], iteration: Callable[[], int]) -> None:
        self._made, self._iteration = made, iteration
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._made.append(self._iteration())
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)


class IterationCounter:
    """Counts event-loop iterations (a callback that re-schedules itself)."""

    def __init__(self) -> None:
        self.count = 0
        self._loop = asyncio.get_running_loop()
        self._stopped = False
        self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.count += 1
        if not self._stopped:
            self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._stopped = True


def connect_all(port: int, n: int) -> list[socket.socket]:
    """``n`` connections completed by the kernel (in the backlog, not yet accepted)."""
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]


def on_loops(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    uvloop.run(main())
    asyncio.run(main())


def test_a_burst_starts_in_one_iteration() -> None:
    async def main() -> None:
        socks = listen_sockets("127.0.0.1", 0)
        port = socks[0].getsockname()[1]
        clients = connect_all(port, BURST)  # all waiting before the server looks
        made: list[int] = []
        counter = IterationCounter()
        server = BurstServer(lambda: Echo(made, lambda: counter.count), socks)
        server.start()
        try:
            for _ in range(200):
                if len(made) == BURST:
                    break
                await asyncio.sleep(0.005)
            assert len(made) == BURST and server.accepted == BURST
            # accepted in one wake, so they all start within an iteration or two (one
            # per iteration, the way libuv accepts, would take BURST iterations)
            assert max(made) - min(made) <= 1, made
        finally:
            counter.stop()
            server.close()
            await server.wait_closed()
            for c in clients:
                c.close()

    on_loops(main)


def test_accepted_connections_carry_data_and_outlive_close() -> None:
    async def main() -> None:
        made: list[int] = []
        server = BurstServer(lambda: Echo(made, lambda: 0), listen_sockets("127.0.0.1", 0))
        server.start()
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        server.close()
        await server.wait_closed()
        assert not server.is_serving() and server.sockets == ()
        writer.write(b"still")  # the accepted connection stays open
        assert await reader.readexactly(5) == b"still"
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        writer.close()

    on_loops(main)


class RunningOutOfFiles:
    """A listening socket whose first ``accept`` fails with EMFILE."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def accept(self) -> tuple[socket.socket, Any]:
        if not self.failed:
            self.failed += 1
            raise OSError(errno.EMFILE, "Too many open files")
        return self._sock.accept()


def test_running_out_of_files_pauses_accepts_then_resumes(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        sock = RunningOutOfFiles(listen_sockets("127.0.0.1", 0)[0])
        made: list[int] = []
        server = BurstServer(lambda: Echo(made, lambda: 0), [sock], pause_s=0.05)  # type: ignore[list-item]
        server.start()
        port = sock.getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"late")
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"late"  # accepted after the pause
        assert sock.failed == 1 and server.accepted == 1
        writer.close()
        server.close()

    asyncio.run(main())
    assert "pausing accepts" in caplog.text


def test_burst_site_serves_an_aiohttp_app() -> None:
    async def hello(_request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/hello", hello)
        runner = web.AppRunner(app)
        await runner.setup()
        await BurstSite(runner, "127.0.0.1", 0).start()
        port = runner.addresses[0][1]
        try:
            async with aiohttp.ClientSession() as session:
                answers = await asyncio.gather(
                    *(session.get(f"http://127.0.0.1:{port}/hello") for _ in range(BURST))
                )
                assert [a.status for a in answers] == [200] * BURST
                for a in answers:
                    a.release()
        finally:
            await runner.cleanup()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()

    on_loops(main)


def test_listen_sockets_bind_every_address_on_one_port() -> None:
    socks = listen_sockets(None, 0)
    try:
        assert socks and len({s.getsockname()[1] for s in socks}) == 1
        assert all(not s.getblocking() for s in socks)
    finally:
        for s in socks:
            s.close()


def test_reuse_port_lets_two_listeners_share_a_port() -> None:
    first = listen_sockets("127.0.0.1", 0, reuse_port=True)
    port = first[0].getsockname()[1]
    try:
        second = listen_sockets("127.0.0.1", port, reuse_port=True)
        for s in second:
            s.close()
        with pytest.raises(OSError):
            listen_sockets("127.0.0.1", port)
    finally:
        for s in first:
            s.close()
