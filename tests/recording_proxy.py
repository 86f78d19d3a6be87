"""A pass-through HTTP proxy in front of a real server (the gateway, a write or read node).

It forwards every request unchanged to ``target`` and the answer back, so the client
under test talks to the product. What only a stand-in can do, it adds: it records each
request (``requests``, ``requests_to``) so a test can check what the client sent; it
answers the next matching requests with an injected error instead of forwarding them
(``fail``); it holds produce requests until released (``hold_produce``); it delays
matching requests (``delay``; ``ack_delay_s`` for acks); it runs a test's coroutine
before forwarding matching requests (``before``), so a test can act while a request is
on its way; it passes the server's real answer to matching requests through a test's
function that may change its status, headers or body (``rewrite``), for answers a
healthy server never gives. It knows nothing of queues, groups or messages.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import web

Rewrite = Callable[[int, dict[str, str], bytes], tuple[int, dict[str, str], bytes]]
"""``(status, headers, body) -> (status, headers, body)`` of an answer."""

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Fault:
    method: str
    path_re: re.Pattern[str]
    status: int
    code: str
    message: str
    retry_after: str | None
    times: int
    extra: dict[str, Any]


class RecordingProxy:
    """See the module docstring."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.requests: list[Recorded] = []
        self.faults: list[Fault] = []
        self.ack_delay_s = 0.0
        self.delays: list[tuple[re.Pattern[str], float]] = []
        self.hooks: list[tuple[re.Pattern[str], Callable[[Recorded], Awaitable[None]]]] = []
        self.rewrites: list[tuple[re.Pattern[str], Rewrite]] = []
        self._hold: asyncio.Event | None = None
        self.produce_arrived: asyncio.Event | None = None
        self._session: aiohttp.ClientSession | None = None

    def fail(
        self,
        method: str,
        path_re: str,
        status: int,
        code: str,
        message: str = "injected failure",
        retry_after: str | None = None,
        times: int = 1,
        **extra: Any,
    ) -> None:
        """Answer the next ``times`` requests matching ``method`` and ``path_re`` with this
        error (the gateway's JSON error shape) instead of forwarding them."""
        self.faults.append(Fault(method, re.compile(path_re), status, code, message, retry_after, times, extra))

    def delay(self, path_re: str, seconds: float) -> None:
        """Wait ``seconds`` before forwarding each request whose path matches ``path_re``."""
        self.delays.append((re.compile(path_re), seconds))

    def before(self, path_re: str, hook: Callable[[Recorded], Awaitable[None]]) -> None:
        """Await ``hook(recorded)`` before forwarding each request whose path matches."""
        self.hooks.append((re.compile(path_re), hook))

    def rewrite(self, path_re: str, fn: Rewrite) -> None:
        """Pass the real answer to each request whose path matches through ``fn``."""
        self.rewrites.append((re.compile(path_re), fn))

    def hold_produce(self) -> None:
        """Produce requests wait (recorded, not yet forwarded) until ``release_produce``."""
        self._hold = asyncio.Event()
        self.produce_arrived = asyncio.Event()

    def release_produce(self) -> None:
        assert self._hold is not None
        self._hold.set()

    def requests_to(self, method: str, suffix: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = raw
        recorded = Recorded(request.method, request.path, dict(request.headers), body)
        self.requests.append(recorded)
        for fault in self.faults:
            if fault.times > 0 and fault.method == request.method and fault.path_re.search(request.path):
                fault.times -= 1
                headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else None
                error = {"error": {"code": fault.code, "message": fault.message, **fault.extra}}
                error_body = orjson.dumps(error)
                return web.Response(status=fault.status, body=error_body, content_type="application/json", headers=headers)
        if self._hold is not None and request.method == "POST" and request.path.endswith("/messages"):
            assert self.produce_arrived is not None
            self.produce_arrived.set()
            await self._hold.wait()
        if self.ack_delay_s and request.path.endswith("/ack"):
            await asyncio.sleep(self.ack_delay_s)
        for path_re, seconds in self.delays:
            if path_re.search(request.path):
                await asyncio.sleep(seconds)
        for path_re, hook in self.hooks:
            if path_re.search(request.path):
                await hook(recorded)
        if self._session is None:
            self._session = aiohttp.ClientSession(auto_decompress=False)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
        async with self._session.request(
            request.method, self.target + request.rel_url.raw_path_qs, headers=headers, data=raw or None
        ) as answer:
            payload = await answer.read()
            status = answer.status
            out = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_HEADERS}
        for path_re, fn in self.rewrites:
            if path_re.search(request.path):
                status, out, payload = fn(status, out, payload)
        return web.Response(status=status, body=payload, headers=out)
