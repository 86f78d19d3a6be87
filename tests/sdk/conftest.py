"""Fixtures for SDK tests: the in-memory fake gateway, served in-loop (async tests) or
from a thread (sync client and CLI tests)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp.test_utils import TestServer

from tests.sdk.fake_gateway import FakeGateway, GatewayThread
from vpq.sdk.client import AsyncClient
from vpq.sdk.retry import RetryPolicy


class RecordingSleep:
    """Stands in for asyncio.sleep in the client: records the delays, waits for none."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def gateway() -> FakeGateway:
    return FakeGateway()


@pytest.fixture
async def server(gateway: FakeGateway) -> AsyncIterator[TestServer]:
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


@pytest.fixture
def threaded_gateway() -> Iterator[GatewayThread]:
    thread = GatewayThread(FakeGateway())
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture
def dead_url() -> str:
    """A loopback URL where nothing listens."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
