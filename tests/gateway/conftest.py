"""Fixtures: the real gateway app over the real ``ClusterBackend``.

One live platform per test module (``tests/live_platform.py``: redis-server, a write node
and a read node, no gateway); each test gets its own ``ClusterBackend`` on it, wrapped in
``RecordingBackend`` so a test can tell what the HTTP layer handed the backend (or that
it stopped a request before the backend), and gateway test clients built by the product's
``create_app`` around it. After each test every queue is deleted, so tests may reuse names.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.live_platform import LivePlatform, platform_settings, running
from vpq.common.errors import NotFound
from vpq.config.settings import GatewaySettings
from vpq.gateway.app import create_app
from vpq.gateway.backend import Backend
from vpq.gateway.cluster_backend import ClusterBackend

MakeClient = Callable[..., Awaitable[TestClient]]


class RecordingBackend:
    """The real backend, every call of the gateway recorded in ``calls`` as ``(method, args)``
    before it is passed on (a produce batch is recorded as its list of messages). Lifecycle
    and health calls (start, stop, ready, metrics_text) are passed on unrecorded."""

    UNRECORDED = frozenset({"start", "stop", "ready", "metrics_text"})

    def __init__(self, real: Backend) -> None:
        self.real = real
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.real, name)
        if name in self.UNRECORDED or not callable(target):
            return target

        async def call(*args: Any) -> Any:
            recorded = (args[0], list(args[1].messages())) if name == "produce" else args
            self.calls.append((name, recorded))
            return await target(*args)

        return call


async def clear_queues(backend: Backend) -> None:
    for q in await backend.list_queues():
        try:
            await backend.delete_queue(q["name"])
        except NotFound:
            pass  # a dead-letter queue, deleted with its queue



@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivePlatform]:
    with running(platform_settings(tmp_path_factory.mktemp("gateway-platform")), gateway=False) as live:
        yield live


@pytest.fixture(scope="module")
def cleaner(platform: LivePlatform) -> Iterator[ClusterBackend]:
    """A backend on the platform's own loop that deletes the queues a test left."""
    admin = ClusterBackend(platform.settings, platform.redis_url)
    platform.run(admin.start())
    yield admin
    platform.run(admin.stop())


@pytest.fixture
def real_backend(platform: LivePlatform) -> ClusterBackend:
    return ClusterBackend(platform.settings, platform.redis_url)


@pytest.fixture
async def backend(
    platform: LivePlatform, cleaner: ClusterBackend, real_backend: ClusterBackend
) -> AsyncIterator[RecordingBackend]:
    yield RecordingBackend(real_backend)
    platform.run(clear_queues(cleaner))


@pytest.fixture
async def make_client(backend: RecordingBackend) -> AsyncIterator[MakeClient]:
    clients: list[TestClient] = []

    async def _make(settings: GatewaySettings | None = None, **kwargs: Any) -> TestClient:
        app = create_app(settings or GatewaySettings(), backend, **kwargs)  # type: ignore[arg-type]
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


async def read_all(client: TestClient, queue: str, n: int, wait_ms: int = 2000) -> list[dict[str, Any]]:
    """The ``n`` messages stored in ``queue`` (env prod), read through the gateway by a fresh
    group and acked, sorted by (partition, offset). Fails when more or fewer are stored."""
    import uuid

    group = f"read-all-{uuid.uuid4().hex[:8]}"
    base = f"/v1/queues/{queue}/groups/{group}/consumers"
    cid = (await (await client.post(base, json={})).json())["consumer_id"]
    got: dict[str, dict[str, Any]] = {}
    for _ in range(20):
        if len(got) >= n:
            break
        r = await client.post(f"{base}/{cid}/poll", json={"max_messages": 1000, "wait_ms": wait_ms if n else 100})
        batch = (await r.json())["messages"]
        got.update((m["id"], m) for m in batch)
        if batch:
            await client.post(f"{base}/{cid}/ack", json={"ids": [m["id"] for m in batch]})
        elif not n:
            break
    extra = (await (await client.post(f"{base}/{cid}/poll", json={"max_messages": 1000, "wait_ms": 50})).json())["messages"]
    await client.delete(f"{base}/{cid}")
    assert len(got) == n and not extra, (n, len(got), extra)
    return sorted(got.values(), key=lambda m: (m["partition"], m["offset"]))
