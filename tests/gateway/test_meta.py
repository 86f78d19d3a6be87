"""Health, readiness, metrics, cluster views, lifecycle: the real gateway over the real
cluster backend."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import MakeClient, RecordingBackend, error_of
from tests.live_platform import LivePlatform
from vpq.common.errors import Unavailable
from vpq.config.settings import GatewaySettings, RedisSettings
from vpq.gateway.app import create_app
from vpq.gateway.cluster_backend import ClusterBackend
from vpq.gateway.responses import ClusterInfo, CurrentMap
from vpq.gateway.server import GatewayServer


async def test_healthz(client: TestClient) -> None:
    r = await client.get("/healthz")
    assert r.status == 200 and await r.json() == {"status": "ok"}


async def test_readyz_follows_the_backend(client: TestClient, platform: LivePlatform, make_client: MakeClient) -> None:
    r = await client.get("/readyz")
    assert r.status == 200 and await r.json() == {"status": "ready"}
    # a cluster whose nodes have not joined: the same Redis under another key prefix
    settings = platform.settings.model_copy(update={"redis": RedisSettings(key_prefix="no-nodes-yet")})
    empty = ClusterBackend(settings, platform.redis_url)
    lonely = TestClient(TestServer(create_app(GatewaySettings(), empty)))
    await lonely.start_server()
    try:
        r = await lonely.get("/readyz")
        await error_of(r, 503, "not_ready")
        assert r.headers["Retry-After"] == "1"
        assert (await lonely.get("/healthz")).status == 200
    finally:
        await lonely.close()


async def test_backend_lifecycle_follows_the_app(make_client: MakeClient, backend: RecordingBackend) -> None:
    assert not await backend.ready()
    client = await make_client()
    assert await backend.ready()  # started with the app
    await client.close()
    assert not await backend.ready()  # stopped with it
    with pytest.raises(Unavailable):
        await backend.list_queues()


async def test_unmanaged_backend_is_left_alone(make_client: MakeClient, backend: RecordingBackend) -> None:
    client = await make_client(manage_backend=False)
    assert not await backend.ready()  # never started
    await error_of(await client.get("/readyz"), 503, "not_ready")


async def test_metrics_parse_and_count(client: TestClient, backend: RecordingBackend) -> None:
    assert (await client.put("/v1/queues/orders")).status == 201
    body = {"messages": [{"value": "abc"}, {"value_b64": "AAEC"}]}
    assert (await client.post("/v1/queues/orders/messages", json=body)).status == 200
    r = await client.get("/metrics")
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(await r.text())}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("vpq_gateway_produced_messages_total", (("queue", "orders"),))] == 2
    assert samples[("vpq_gateway_produced_bytes_total", (("queue", "orders"),))] == len(b'"abc"') + 3
    key = ("vpq_gateway_requests_total", (("method", "PUT"), ("route", "/v1/queues/{queue}"), ("status", "201")))
    assert samples[key] == 1
    assert "vpq_gateway_request_seconds" in families
    node_samples = {(s.name, s.labels.get("node")) for f in families.values() for s in f.samples if "node" in s.labels}
    assert {node for _, node in node_samples} == {"w0", "r0"}  # the nodes' own metrics, labelled per node


async def test_metrics_survive_a_backend_without_metrics(client: TestClient, backend: RecordingBackend) -> None:
    async def broken() -> str:
        raise Unavailable("unavailable", "nodes away")

    backend.metrics_text = broken  # type: ignore[method-assign]
    r = await client.get("/metrics")
    assert r.status == 200 and "vpq_gateway_requests_total" in await r.text()


async def test_two_apps_have_separate_registries(make_client: MakeClient) -> None:
    a = await make_client()
    b = await make_client()
    await a.get("/healthz")
    await a.get("/healthz")
    text_b = await (await b.get("/metrics")).text()
    assert 'route="/healthz"' not in text_b


async def test_cluster_and_map(client: TestClient) -> None:
    await client.put("/v1/queues/orders", json={"virtual_partitions": 2})
    cluster = ClusterInfo.model_validate(await (await client.get("/v1/cluster")).json())
    assert len(cluster.physical_partitions) == 4
    current = CurrentMap.model_validate(await (await client.get("/v1/maps/current")).json())
    assert current.epoch == cluster.epoch
    assert current.queues["orders"].virtual_partitions == 2 and len(current.queues["orders"].placement) == 2


async def test_gateway_server_start_stop(backend: RecordingBackend) -> None:
    settings = GatewaySettings(host="127.0.0.1", port=0)
    server = GatewayServer(create_app(settings, backend), settings)
    await server.start()
    try:
        assert server.port and server.port > 0
        async with aiohttp.ClientSession() as s, s.get(server.url + "/readyz") as r:
            assert r.status == 200
        with pytest.raises(RuntimeError):
            await server.start()
    finally:
        await server.stop()
    assert not await backend.ready()  # stopped with the server
    with pytest.raises(RuntimeError):
        _ = server.url
