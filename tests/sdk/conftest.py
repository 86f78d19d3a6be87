"""Fixtures for SDK tests: one real platform per test module (``tests/live_platform.py``:
redis-server, a write node, a read node and the real gateway), reached through a
recording pass-through proxy (``tests/recording_proxy.py``) served in-loop (async
tests) or from the platform's thread (sync client and CLI tests). Tests share the
module's platform, so each one names its own queues (``q``)."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.live_platform import LivePlatform, platform_settings, running
from tests.recording_proxy import RecordingProxy
from vpq.sdk.client import AsyncClient
from vpq.sdk.models import Message
from vpq.sdk.retry import RetryPolicy

READ_BACK_S = 10.0  # only a hang guard for reading a queue back


class RecordingSleep:
    """Stands in for asyncio.sleep in the client: records the delays, waits for none."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivePlatform]:
    with running(platform_settings(tmp_path_factory.mktemp("sdk-platform"))) as live:
        yield live


@pytest.fixture
def q() -> str:
    """A queue name unique to the test (the platform is shared by the module); short, so
    that the CLI's tables do not wrap it."""
    return f"q-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def gateway(platform: LivePlatform) -> RecordingProxy:
    return RecordingProxy(platform.url)


@pytest.fixture
async def server(gateway: RecordingProxy) -> AsyncIterator[TestServer]:
    srv = TestServer(gateway.app())
    await srv.start_server()
    yield srv
    await srv.close()


@pytest.fixture
def sleeps() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
async def client(server: TestServer, sleeps: RecordingSleep) -> AsyncIterator[AsyncClient]:
    c = AsyncClient(str(server.make_url("")), retry=RetryPolicy(attempts=4), sleep=sleeps)
    yield c
    await c.close()


@dataclass
class ThreadedGateway:
    """The recording proxy served from the platform's thread, for synchronous code."""

    url: str
    proxy: RecordingProxy
    platform: LivePlatform


@pytest.fixture
def threaded_gateway(platform: LivePlatform) -> Iterator[ThreadedGateway]:
    proxy = RecordingProxy(platform.url)
    url = platform.serve(proxy.app())
    yield ThreadedGateway(url, proxy, platform)
    platform.unserve()


@pytest.fixture
def dead_url() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def read_back(url: str, queue: str, n: int, env: str = "prod") -> list[Message]:
    """The ``n`` messages of ``env`` stored in ``queue`` (env is never crossed; lanes and
    sets fall back to this backbone consumer), read by a fresh group straight from the
    gateway at ``url`` (acked as read, so key-ordered vps keep flowing), in log order: by
    partition, then offset. Fails when more or fewer are stored."""
    group = f"read-back-{uuid.uuid4().hex[:8]}"
    got: dict[str, Message] = {}
    async with AsyncClient(url) as c:
        cid = (await c.join(queue, group, env=env, start="earliest")).consumer_id
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READ_BACK_S
        while len(got) < n and loop.time() < deadline:
            batch = await c.poll(queue, group, cid, max_messages=1000, wait_ms=200)
            got.update((m.id, m) for m in batch)
            if batch:
                await c.ack(queue, group, cid, [m.id for m in batch])
        extra = await c.poll(queue, group, cid, max_messages=1000, wait_ms=50)
        await c.leave(queue, group, cid)
    assert len(got) == n and not extra, (n, len(got), extra)
    return sorted(got.values(), key=lambda m: (m.partition, m.offset))


async def values(url: str, queue: str, n: int, env: str = "prod") -> list[Any]:
    """The values of ``read_back``."""
    return [m.value for m in await read_back(url, queue, n, env)]
