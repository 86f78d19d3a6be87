"""A fast lane in front of an aiohttp server: the few hot requests of a role are answered
by a lean HTTP/1.1 protocol, everything else by the full aiohttp application.

A ``LaneSite`` listens like aiohttp's ``TCPSite``. Each new connection starts on a
``LaneProtocol``, which reads plain keep-alive requests (``common.http1``) and offers each
to the ``Lane``: ``lane.take(head, body)`` answers an awaitable of the ``LaneAnswer``, or
None to decline. The first request the lane declines, or that is not plain HTTP/1.1
(chunked bodies, ``Expect``, upgrades, HTTP/1.0, a malformed head...), hands the
connection over to aiohttp: its request handler gets the transport and every byte not yet
answered, from that request's first byte on, so aiohttp answers it (and any error it
carries) exactly as it answers every request. A connection never comes back to the lane.

Order and safety: one request of a connection is in the lane at a time; the next is
neither parsed nor handed over before its answer is written. A lane takes a request only
when it is sure to answer it itself (its checks are done before it returns the
awaitable), so a declined request has had no effect. A lane's awaitable runs to its end
even when the client goes away (a produce is never cut in half); its answer is then
dropped. ``stop()`` (through the runner's cleanup) stops listening, waits up to the
shutdown timeout for the lane requests in flight, and closes the lane's connections.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import orjson
from aiohttp import web

from vpq.common.burst_accept import BurstServer, listen_sockets
from vpq.common.errors import VpqError
from vpq.common.http1 import NOT_PLAIN, RequestHead, parse_request_head, render_answer

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 16384


@dataclass(frozen=True, slots=True)
class LaneAnswer:
    """What a lane answers: status, body, content type and extra headers."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: list[tuple[str, str]] = field(default_factory=list)


def error_answer(err: VpqError) -> LaneAnswer:
    """The JSON answer of ``err`` (``common.errors``), with its headers (``Retry-After``...)."""
    return LaneAnswer(err.status, orjson.dumps(err.to_dict()), headers=list(err.headers().items()))


class Lane(Protocol):
    """The requests a role answers itself."""

    max_body_bytes: int

    def wants(self, head: RequestHead) -> bool:
        """Whether the lane may take this request, judged on its head alone (a False hands
        the connection over before the body is read)."""

    def take(self, head: RequestHead, body: bytes) -> Coroutine[Any, Any, LaneAnswer] | None:
        """A coroutine giving the answer (the connection runs it as a task), or None to
        decline (then the request must have had no effect)."""


class LaneProtocol(asyncio.Protocol):
    """One connection, in the lane until a request goes to ``fallback`` (aiohttp's
    protocol factory)."""

    def __init__(self, lane: Lane, fallback: Any, registry: set[LaneProtocol]) -> None:
        self._lane = lane
        self._fallback = fallback
        self._registry = registry
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._waiting: tuple[RequestHead, int] | None = None  # a taken head, and where its body ends
        self._busy: asyncio.Task[None] | None = None
        self._paused = False
        self._eof = False

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        self._registry.add(self)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._busy is None:
            self._next()
        elif len(self._buf) > self._lane.max_body_bytes + MAX_HEAD_BYTES and not self._paused:
            assert self._transport is not None
            self._transport.pause_reading()
            self._paused = True

    def eof_received(self) -> bool | None:
        # a half-closed client still gets the answers of the requests it sent
        self._eof = True
        return True if self._busy is not None else None

    def connection_lost(self, exc: BaseException | None) -> None:
        self._registry.discard(self)
        self._transport = None
        self._buf.clear()
        self._waiting = None

    # -- the lane ------------------------------------------------------------------------

    @property
    def busy(self) -> asyncio.Task[None] | None:
        """The lane request in flight on this connection, if any."""
        return self._busy

    def close(self) -> None:
        """Close the connection (at shutdown)."""
        if self._transport is not None:
            self._transport.close()

    def _next(self) -> None:
        """Take the next whole request from the buffer, or hand the connection over."""
        if not self._buf or self._transport is None:
            return
        if self._waiting is not None:  # the head was read and checked when its first bytes came
            head, end = self._waiting
            if len(self._buf) < end:
                return
            self._waiting = None
        else:
            parsed = parse_request_head(self._buf, MAX_HEAD_BYTES)
            if parsed is None:
                return
            if parsed is NOT_PLAIN or not _plain_body(parsed) or not self._lane.wants(parsed):
                self._hand_over()
                return
            assert isinstance(parsed, RequestHead)
            head = parsed
            length = head.content_length or 0
            if length > self._lane.max_body_bytes:
                self._hand_over()
                return
            end = head.size + length
            if len(self._buf) < end:
                self._waiting = head, end
                return
        with memoryview(self._buf) as view:  # the body copied once (a bytearray slice would copy it twice)
            body = bytes(view[head.size : end])
        answer = self._lane.take(head, body)
        if answer is None:
            self._hand_over()
            return
        del self._buf[:end]
        self._busy = asyncio.get_running_loop().create_task(self._answer(answer, head.keep_alive))

    async def _answer(self, pending: Coroutine[Any, Any, LaneAnswer], keep_alive: bool) -> None:
        try:
            answer = await pending
        except asyncio.CancelledError:
            self._busy = None
            self.close()
            raise
        except Exception:
            log.exception("a lane request failed; closing its connection")
            self._busy = None
            self.close()
            return
        self._busy = None
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        transport.write(render_answer(answer.status, answer.body, answer.content_type, answer.headers, not keep_alive))
        if not keep_alive:
            transport.close()
            return
        if self._paused:
            self._paused = False
            transport.resume_reading()
        self._next()
        if self._eof and self._busy is None and self._transport is not None:
            self._transport.close()

    def _hand_over(self) -> None:
        """Give the transport and every unanswered byte to aiohttp's protocol."""
        transport = self._transport
        assert transport is not None
        self._registry.discard(self)
        protocol = self._fallback()
        transport.set_protocol(protocol)
        protocol.connection_made(transport)
        data, self._buf = bytes(self._buf), bytearray()
        self._transport = None
        if self._paused:
            self._paused = False
            transport.resume_reading()
        if data:
            protocol.data_received(data)
        if self._eof:
            protocol.eof_received()


def _plain_body(head: RequestHead) -> bool:
    """True when the body is framed by ``Content-Length`` alone (or absent) and nothing
    asks for more than a plain answer."""
    headers = head.headers
    return (
        "transfer-encoding" not in headers
        and "expect" not in headers
        and "upgrade" not in headers
        and ("content-length" not in headers or head.content_length is not None)
    )


class LaneSite(web.BaseSite):
    """An aiohttp site (on ``host``/``port``, or on already bound ``socks``) whose
    connections start in ``lane``; ``reuse_port`` lets other processes listen on the same
    host and port (``SO_REUSEPORT``). It accepts through a ``common.burst_accept.BurstServer``."""

    def __init__(
        self,
        runner: web.BaseRunner,
        lane: Lane,
        *,
        host: str | None = None,
        port: int = 0,
        socks: Sequence[socket.socket] | None = None,
        shutdown_timeout_s: float = 5.0,
        reuse_port: bool = False,
    ) -> None:
        super().__init__(runner)
        if (not socks) == (host is None):
            raise ValueError("give either host and port or socks")
        self._lane = lane
        self._host, self._port, self._socks = host, port, list(socks or ())
        self._lane_shutdown_s = shutdown_timeout_s
        self._reuse_port = reuse_port
        self._connections: set[LaneProtocol] = set()

    @property
    def name(self) -> str:
        if self._socks:
            host, port = self._socks[0].getsockname()[:2]
            return f"http://{host}:{port}"
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        fallback = self._runner.server
        assert fallback is not None
        connections = self._connections
        lane = self._lane

        def factory() -> LaneProtocol:
            return LaneProtocol(lane, fallback, connections)

        socks = self._socks
        if not socks:
            socks = listen_sockets(self._host, self._port, backlog=self._backlog, reuse_port=self._reuse_port)
        server = BurstServer(factory, socks)
        server.start()
        self._server = server  # type: ignore[assignment]

    async def stop(self) -> None:
        """Stop listening, let the lane requests in flight finish (up to the shutdown
        timeout), close the lane's connections."""
        await super().stop()
        pending = [c.busy for c in self._connections if c.busy is not None]
        if pending:
            await asyncio.wait(pending, timeout=self._lane_shutdown_s)
        for connection in list(self._connections):
            connection.close()
