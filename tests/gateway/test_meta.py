"""Health, readiness, metrics, cluster views, lifecycle."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import MakeClient, error_of
from tests.gateway.memory_backend import MemoryBackend
from vpq.common.errors import Unavailable
from vpq.config.settings import GatewaySettings
from vpq.gateway.app import create_app
from vpq.gateway.responses import ClusterInfo, CurrentMap
from vpq.gateway.server import GatewayServer


async def test_healthz(client: TestClient) -> None:
    r = await client.get("/healthz")
    assert r.status == 200 and await r.json() == {"status": "ok"}


async def test_readyz_follows_the_backend(client: TestClient, backend: MemoryBackend) -> None:
    r = await client.get("/readyz")
    assert r.status == 200 and await r.json() == {"status": "ready"}
    backend.is_ready = False
    r = await client.get("/readyz")
    await error_of(r, 503, "not_ready")
    assert r.headers["Retry-After"] == "1"
    assert (await client.get("/healthz")).status == 200


async def test_backend_lifecycle_follows_the_app(make_client: MakeClient, backend: MemoryBackend) -> None:
    client = await make_client()
    assert backend.started and not backend.stopped
    await client.close()
    assert backend.stopped


async def test_unmanaged_backend_is_left_alone(make_client: MakeClient, backend: MemoryBackend) -> None:
    client = await make_client(manage_backend=False)
    assert not backend.started
    await error_of(await client.get("/readyz"), 503, "not_ready")


async def test_metrics_parse_and_count(client: TestClient, backend: MemoryBackend) -> None:
    backend.extra_metrics = "# HELP vpq_node_up node is up\n# TYPE vpq_node_up gauge\nvpq_node_up{node=\"w1\"} 1\n"
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
    assert samples[("vpq_node_up", (("node", "w1"),))] == 1


async def test_metrics_survive_a_backend_without_metrics(client: TestClient, backend: MemoryBackend) -> None:
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
    assert cluster.epoch == 1 and len(cluster.physical_partitions) == 4
    current = CurrentMap.model_validate(await (await client.get("/v1/maps/current")).json())
    assert current.queues["orders"].virtual_partitions == 2 and len(current.queues["orders"].placement) == 2


async def test_gateway_server_start_stop(backend: MemoryBackend) -> None:
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
    assert backend.stopped
    with pytest.raises(RuntimeError):
        _ = server.url
