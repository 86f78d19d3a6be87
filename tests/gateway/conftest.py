"""Fixtures: a fresh in-memory backend and gateway test clients around it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.gateway.memory_backend import MemoryBackend
from vpq.config.settings import GatewaySettings
from vpq.gateway.app import create_app

MakeClient = Callable[..., Awaitable[TestClient]]


@pytest.fixture
def backend() -> MemoryBackend:
    return MemoryBackend()


@pytest.fixture
async def make_client(backend: MemoryBackend) -> AsyncIterator[MakeClient]:
    clients: list[TestClient] = []

    async def _make(settings: GatewaySettings | None = None, **kwargs: Any) -> TestClient:
        app = create_app(settings or GatewaySettings(), backend, **kwargs)
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return client

    yield _make
    for c in clients:
        await c.close()


@pytest.fixture
async def client(make_client: MakeClient) -> TestClient:
    return await make_client()


async def error_of(resp: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """Assert a JSON error answer and return its error object."""
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"]
    if code is not None:
        assert err["code"] == code, err
    return err
