"""A lean HTTP/1.1 keep-alive connection pool for one server, on asyncio Protocols.

It runs on whatever loop is running (uvloop's or asyncio's); bytes are encoded and
parsed by :mod:`sdk.http1_codec`.

Contract:

* :meth:`Http1Pool.request` sends one request and answers the complete
  :class:`sdk.http1_codec.ResponseParser` (``status``, ``header(name)``, ``headers``,
  ``body`` de-chunked). It never raises for an HTTP status.
* At most ``max_connections`` connections are open or opening; a request beyond them
  waits for one to come free. A connection carries one request at a time and is reused
  (most recently used first) while the server keeps it alive. It is dropped, never
  reused, when the server closes it or answers ``Connection: close``, when its answer
  is malformed, and when its request fails, times out or is cancelled.
* A request whose reused connection turns out dead before any byte of the answer came
  is sent once more on a fresh connection, only for methods that change nothing when
  repeated (GET, HEAD, OPTIONS, TRACE, PUT, DELETE); a POST raises instead.
* ``timeout`` bounds the whole request: waiting for a connection, connecting, sending,
  answering. When it passes, :class:`TimeoutError` is raised.
* Failures raise :class:`ConnectFailed` (connecting; ``os_error`` holds the cause),
  :class:`ServerDisconnected` (the connection ended before the answer was complete),
  :class:`sdk.http1_codec.BadHttpResponse`, :class:`PoolClosed` or :class:`TimeoutError`;
  :class:`ValueError` for a header holding CR/LF before anything is sent.
* :meth:`Http1Pool.stop` closes every connection, idle or busy; requests in flight then
  fail with :class:`ServerDisconnected` and later ones with :class:`PoolClosed`.
"""

from __future__ import annotations

import asyncio
import math
import socket
from collections import deque
from collections.abc import Mapping

from vpq.sdk.http1_codec import BadHttpResponse, ResponseParser, encode_request, encode_request_buffers

TIMER_SLACK_S = 0.001
"""A request is expired by a timer that fires up to this early (timers have 1 ms steps)."""
RETRY_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})


class HttpTransportError(Exception):
    """The request got no (complete) answer."""


class ConnectFailed(HttpTransportError):
    """A new connection could not be opened; ``os_error`` is why."""

    def __init__(self, os_error: OSError) -> None:
        super().__init__(str(os_error))
        self.os_error = os_error


class ServerDisconnected(HttpTransportError):
    """The connection ended before the answer was complete. ``before_answer`` is true
    when not a byte of the answer had arrived."""

    def __init__(self, message: str, before_answer: bool) -> None:
        super().__init__(message)
        self.before_answer = before_answer


class PoolClosed(HttpTransportError):
    """The pool was stopped."""


class _Connection(asyncio.Protocol):
    """One connection: at most one request in flight (``waiter``, answered by ``parser``)."""

    def __init__(self, pool: Http1Pool) -> None:
        self._pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None
        self.waiter: asyncio.Future[ResponseParser] | None = None
        self.closed = False
        self.requests = 0
        self.deadline = 0.0

    # -- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport subclass
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass

    def data_received(self, data: bytes) -> None:
        parser = self.parser
        if parser is None:  # bytes while idle: the stream is out of step
            self.close()
            return
        try:
            done = parser.feed(data)
        except BadHttpResponse as exc:
            self._fail(exc)
            return
        if done:
            self._complete(parser)

    def eof_received(self) -> bool:
        parser = self.parser
        if parser is None:  # the server closed an idle connection: out of the pool now
            self.close()
        else:
            try:
                if parser.feed_eof():
                    self._complete(parser)
                else:
                    self._fail(ServerDisconnected("the server closed the connection without answering", True))
            except BadHttpResponse as exc:
                self._fail(exc)
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self._pool._forget(self)
        parser, waiter = self.parser, self.waiter
        self.parser = self.waiter = None
        if waiter is not None and not waiter.done():
            before = parser is None or not parser.started
            err = ServerDisconnected(
                f"the connection was lost{' before the answer' if before else ' in the middle of the answer'}"
                + (f": {exc!r}" if exc is not None else ""),
                before,
            )
            err.__cause__ = exc
            waiter.set_exception(err)

    # -- the pool's side -----------------------------------------------------------------

    def send(
        self, data: bytes | list[bytes | bytearray], head_only: bool, loop: asyncio.AbstractEventLoop
    ) -> asyncio.Future[ResponseParser]:
        """Write the request ``data`` (bytes, or buffers written in order) and answer the
        future of its answer."""
        assert self.transport is not None
        self.requests += 1
        self.parser = ResponseParser(head_only)
        self.waiter = waiter = loop.create_future()
        if isinstance(data, list):
            self.transport.writelines(data)
        else:
            self.transport.write(data)
        return waiter

    def expire(self) -> None:
        """The request's time is up: fail it and drop the connection."""
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(TimeoutError())
        self.close()

    def close(self) -> None:
        """Drop the connection at once (idempotent); its slot frees now."""
        if not self.closed:
            self.closed = True
            if self.transport is not None:
                self.transport.abort()
            self._pool._forget(self)

    def _complete(self, parser: ResponseParser) -> None:
        waiter = self.waiter
        self.parser = self.waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_result(parser)

    def _fail(self, exc: Exception) -> None:
        waiter = self.waiter
        self.parser = self.waiter = None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()


class Http1Pool:
    """Keep-alive connections to ``host``:``port`` (see the module docstring). ``fixed``
    is the header block every request carries (:func:`sdk.http1_codec.fixed_headers`)."""

    def __init__(self, host: str, port: int, fixed: bytes, max_connections: int = 64) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        self._host = host
        self._port = port
        self._fixed = fixed
        self._max = max_connections
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._opening = 0
        self._waiters: deque[asyncio.Future[_Connection | None]] = deque()
        self._stopped = False
        self._busy: set[_Connection] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def start(self) -> None:
        """Bind the pool to the running loop (connections open on first use)."""
        self._loop = asyncio.get_running_loop()

    async def stop(self) -> None:
        """Close every connection; later requests raise :class:`PoolClosed`."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._busy.clear()
        for conn in list(self._all):
            conn.close()
        self._idle.clear()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(PoolClosed("the connection pool is closed"))
        await asyncio.sleep(0)  # the transports finish closing (their sockets) on the next turn

    @property
    def size(self) -> int:
        """Connections open or opening."""
        return len(self._all) + self._opening

    @property
    def idle(self) -> int:
        return len(self._idle)

    async def request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str] | None,
        body: bytes | list[bytes | bytearray] | None,
        timeout: float,
        content_type: bytes = b"application/json",
    ) -> ResponseParser:
        """Send ``method target`` with ``headers`` and ``body`` (of ``content_type``; see
        :func:`sdk.http1_codec.encode_request`; a list of buffers is the body of their
        concatenation, written out without joining them); answers the complete answer."""
        loop = self._loop
        if loop is None:
            self.start()
            loop = self._loop
            assert loop is not None
        data: bytes | list[bytes | bytearray]
        if isinstance(body, list):
            data = encode_request_buffers(method, target, self._fixed, headers, body, content_type)
        else:
            data = encode_request(method, target, self._fixed, headers, body, content_type)
        deadline = loop.time() + timeout
        head_only = method == "HEAD"
        may_retry = method in RETRY_SAFE_METHODS
        while True:
            if self._stopped:
                raise PoolClosed("the connection pool is closed")
            idle = self._idle
            conn = idle.pop() if idle else await self._acquire(deadline)
            if conn.closed:
                continue
            reused = conn.requests > 0
            waiter = conn.send(data, head_only, loop)
            self._watch(conn, deadline)
            try:
                parser = await waiter
            except ServerDisconnected as exc:
                conn.close()
                if may_retry and reused and exc.before_answer:
                    may_retry = False
                    continue
                raise
            except BaseException:
                conn.close()  # timed out, cancelled or malformed: never reused mid-answer
                raise
            finally:
                self._busy.discard(conn)
            self._release(conn, parser.keep_alive)
            return parser

    # -- deadlines -----------------------------------------------------------------------

    def _watch(self, conn: _Connection, deadline: float) -> None:
        """Expire ``conn`` at ``deadline`` unless its request ends first. One timer serves
        the pool, set at the earliest deadline: a request with the same timeout as those
        before it starts no timer of its own."""
        conn.deadline = deadline
        self._busy.add(conn)
        if deadline < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            assert self._loop is not None
            self._timer_at = deadline
            self._timer = self._loop.call_at(deadline, self._sweep)

    def _sweep(self) -> None:
        """Expire the requests whose deadline passed; set the timer for the next one."""
        assert self._loop is not None
        self._timer, self._timer_at = None, math.inf
        now = self._loop.time() + TIMER_SLACK_S
        following = math.inf
        for conn in list(self._busy):
            if conn.deadline <= now:
                self._busy.discard(conn)
                conn.expire()
            elif conn.deadline < following:
                following = conn.deadline
        if following < math.inf:
            self._timer_at = following
            self._timer = self._loop.call_at(following, self._sweep)

    # -- connections ---------------------------------------------------------------------

    async def _acquire(self, deadline: float) -> _Connection:
        """An idle connection, a new one, or the next one freed (None from a waiter: a slot
        came free, try again)."""
        loop = self._loop
        assert loop is not None
        while True:
            if self._stopped:
                raise PoolClosed("the connection pool is closed")
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn
            if self.size < self._max:
                return await self._connect(deadline)
            waiter: asyncio.Future[_Connection | None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    got = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    handed = waiter.result()
                    if handed is not None:
                        self._release(handed, True)  # handed over as we gave up: pass it on
                    else:
                        self._wake()
                else:
                    try:
                        self._waiters.remove(waiter)
                    except ValueError:
                        pass
                raise
            if got is not None and not got.closed:
                return got

    async def _connect(self, deadline: float) -> _Connection:
        loop = self._loop
        assert loop is not None
        self._opening += 1
        try:
            async with asyncio.timeout_at(deadline):
                try:
                    _, conn = await loop.create_connection(lambda: _Connection(self), self._host, self._port)
                except OSError as exc:
                    raise ConnectFailed(exc) from exc
        except BaseException:
            self._opening -= 1
            self._wake()
            raise
        self._opening -= 1
        if self._stopped:
            conn.closed = True
            if conn.transport is not None:
                conn.transport.abort()
            raise PoolClosed("the connection pool is closed")
        self._all.add(conn)
        if conn.closed:  # lost while we were not looking
            self._forget(conn)
        return conn

    def _release(self, conn: _Connection, keep_alive: bool) -> None:
        if not keep_alive or self._stopped:
            conn.close()
            return
        if conn.closed:
            return
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return
        self._idle.append(conn)

    def _forget(self, conn: _Connection) -> None:
        """``conn`` is closed: free its slot, and let a waiter open a new one."""
        if conn in self._all:
            self._all.discard(conn)
            try:
                self._idle.remove(conn)
            except ValueError:
                pass
            self._wake()

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
