"""Listening that accepts a burst of new connections in one event-loop iteration.

libuv, under uvloop, accepts one connection per loop iteration (libuv/libuv#3696). On a
busy node whose iterations each run a few ms of work, 64 consumers joining at once then
reach the handlers one iteration apart: the last is accepted hundreds of ms after the
first. ``BurstServer`` watches the listening socket itself and, each time it is readable,
accepts every connection waiting (up to ``max_per_wake``), handing each to the protocol
factory with ``loop.connect_accepted_socket``; they all start in the next iteration.

``BurstServer`` has what aiohttp's sites use of an ``asyncio.Server`` (``sockets``,
``close``, ``wait_closed``, ``is_serving``). ``BurstSite`` is aiohttp's ``TCPSite`` on a
``BurstServer``; ``common.http_lane.LaneSite`` listens through one too.

Errors: a connection reset before it is accepted is skipped; running out of file
descriptors or buffers (``EMFILE``, ``ENFILE``, ``ENOBUFS``, ``ENOMEM``) is logged and
accepting pauses for ``pause_s`` (the waiting connections stay in the kernel's backlog),
as asyncio's own server does.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Callable, Sequence

from aiohttp import web

log = logging.getLogger(__name__)

PAUSE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
DEFAULT_BACKLOG = 1024


def listen_sockets(
    host: str | None, port: int, *, backlog: int = DEFAULT_BACKLOG, reuse_port: bool = False
) -> list[socket.socket]:
    """Non-blocking TCP sockets listening on every address of ``host`` (None or ``""``:
    all interfaces) on ``port`` (0: a free port, the same for all of them), as
    ``loop.create_server`` binds them: ``SO_REUSEADDR``, ``SO_REUSEPORT`` when asked
    (other processes on the same port), IPv6 sockets IPv6-only."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    socks: list[socket.socket] = []
    seen: set[tuple[int, str]] = set()
    try:
        for family, type_, proto, _name, addr in infos:
            if (family, addr[0]) in seen:
                continue
            seen.add((family, addr[0]))
            sock = socket.socket(family, type_, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            bound_port = socks[0].getsockname()[1] if port == 0 and len(socks) > 1 else port
            sock.bind((addr[0], bound_port, *addr[2:]))
            sock.listen(backlog)
            sock.setblocking(False)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


class BurstServer:
    """Serves the listening ``socks`` with ``factory``, accepting every waiting connection
    of a socket when it is readable (see the module docstring). ``start()`` begins,
    ``close()`` stops listening and closes the sockets; connections already accepted stay
    open."""

    def __init__(
        self,
        factory: Callable[[], asyncio.BaseProtocol],
        socks: Sequence[socket.socket],
        *,
        max_per_wake: int = DEFAULT_BACKLOG,
        pause_s: float = 1.0,
    ) -> None:
        if not socks:
            raise ValueError("a BurstServer needs a listening socket")
        self._factory = factory
        self._socks = tuple(socks)
        self._max = max(1, max_per_wake)
        self._pause_s = pause_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._serving = False
        self._resumes: dict[int, asyncio.TimerHandle] = {}
        self._pending: set[asyncio.Task[object]] = set()
        self.accepted = 0

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return self._socks if self._serving else ()

    def is_serving(self) -> bool:
        return self._serving

    def start(self) -> None:
        if self._serving:
            return
        loop = self._loop = asyncio.get_running_loop()
        for sock in self._socks:
            sock.setblocking(False)
            loop.add_reader(sock.fileno(), self._accept_ready, sock)
        self._serving = True

    def _accept_ready(self, sock: socket.socket) -> None:
        loop = self._loop
        assert loop is not None
        for _ in range(self._max):
            try:
                conn, _addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno not in PAUSE_ERRNOS:
                    raise
                log.error("cannot accept a connection (%s); pausing accepts for %.1f s", exc, self._pause_s)
                loop.remove_reader(sock.fileno())
                self._resumes[sock.fileno()] = loop.call_later(self._pause_s, self._resume_accepting, sock)
                return
            conn.setblocking(False)
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.accepted += 1
            task = loop.create_task(self._connect(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    def _resume_accepting(self, sock: socket.socket) -> None:
        self._resumes.pop(sock.fileno(), None)
        if self._serving and self._loop is not None:
            self._loop.add_reader(sock.fileno(), self._accept_ready, sock)

    async def _connect(self, conn: socket.socket) -> None:
        assert self._loop is not None
        try:
            await self._loop.connect_accepted_socket(self._factory, sock=conn)
        except Exception as exc:  # the peer went away before the transport started
            log.debug("an accepted connection could not start: %r", exc)
            conn.close()

    def close(self) -> None:
        if not self._serving:
            return
        self._serving = False
        for handle in self._resumes.values():
            handle.cancel()
        self._resumes.clear()
        for sock in self._socks:
            if self._loop is not None:
                self._loop.remove_reader(sock.fileno())
            sock.close()

    async def wait_closed(self) -> None:
        """Wait for the accepted connections still starting."""
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)


class BurstSite(web.BaseSite):
    """aiohttp's ``TCPSite`` (``host``/``port``, ``reuse_port``) on a ``BurstServer``."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str | None,
        port: int = 0,
        *,
        reuse_port: bool = False,
        backlog: int = DEFAULT_BACKLOG,
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._host, self._port, self._reuse_port = host, port, reuse_port

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        socks = listen_sockets(self._host, self._port, backlog=self._backlog, reuse_port=self._reuse_port)
        burst = BurstServer(server, socks)
        burst.start()
        self._server = burst  # type: ignore[assignment]
