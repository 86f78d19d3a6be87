"""Node metrics in the gateway: the pure family merge, the scraper against small HTTP nodes
(one healthy, one failing, one too slow, one unreachable), and ``GET /metrics`` of the
gateway app over ``ClusterBackend`` with two registered nodes (real Redis): one valid
exposition, one HELP/TYPE per family, every node series labelled with its node."""

from __future__ import annotations

import asyncio
import re
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from vpq.config.settings import ClusterSettings, RedisSettings, Settings
from vpq.gateway.app import create_app
from vpq.gateway.cluster_backend import ClusterBackend
from vpq.gateway.cluster_metrics import NodeMetricsScraper, NodeTarget, merge_families, parse_text, render
from vpq.metadata.store import MetadataStore
from vpq.read_nodes.metrics import GroupSample, NodeSample, ReadNodeMetrics
from vpq.write_nodes.metrics import WriteNodeMetrics

WRITE_TEXT = """# HELP vpq_produced_messages_total Messages appended durably.
# TYPE vpq_produced_messages_total counter
vpq_produced_messages_total{queue="q",partition="0"} 5.0
# HELP vpq_fsync_seconds fsync.
# TYPE vpq_fsync_seconds histogram
vpq_fsync_seconds_bucket{partition="0",le="0.001"} 1.0
vpq_fsync_seconds_bucket{partition="0",le="+Inf"} 2.0
vpq_fsync_seconds_count{partition="0"} 2.0
vpq_fsync_seconds_sum{partition="0"} 0.004
# HELP vpq_shared gauge here.
# TYPE vpq_shared gauge
vpq_shared 1.0
"""


def write_text(messages: int) -> str:
    m = WriteNodeMetrics()
    m.appended(0, 100, {(1, 0, 0): [messages, 10 * messages]}, {1: ("orders", 4)}, 0.002)
    m.fsync_seconds.labels("0").observe(0.0005)
    rows = [{"id": 0, "start_offset": 0, "end_offset": messages, "next_offset": messages, "bytes": 100, "online": True}]
    return m.render(rows, 3).decode()


def read_text() -> str:
    m = ReadNodeMetrics()
    m.delivered("orders", "g", [{"delivery_count": 1}, {"delivery_count": 2}])
    m.acked("orders", "g", 1)
    g = GroupSample("orders", "g", 4, {"": 3, "feat-a": 1}, {"prod": 4}, {"": 4}, 1, 1, 2, 0)
    return m.render(NodeSample(groups=[g], tailers=[{"pp": 0, "records_tailed": 9}])).decode()


def families(text: str) -> dict[str, list[Sample]]:
    return {f.name: list(f.samples) for f in text_string_to_metric_families(text)}


def type_lines(text: str) -> Counter[str]:
    return Counter(re.findall(r"^# TYPE (\S+)", text, flags=re.M))


def test_merge_labels_each_node_and_keeps_one_family_per_name() -> None:
    other = WRITE_TEXT.replace(' 5.0', ' 7.0').replace("vpq_shared gauge", "vpq_shared counter").replace(
        "vpq_shared 1.0", "vpq_shared_total 1.0"
    )
    merged = merge_families(
        [({"node": "w0"}, parse_text(WRITE_TEXT)), ({"node": "w1"}, parse_text(other))], reserved=["vpq_nope"]
    )
    text = render(merged)
    fams = families(text)
    assert all(n == 1 for n in type_lines(text).values())
    produced = {s.labels["node"]: s.value for s in fams["vpq_produced_messages"]}
    assert produced == {"w0": 5.0, "w1": 7.0}
    assert {s.labels["node"] for s in fams["vpq_fsync_seconds"]} == {"w0", "w1"}
    assert len([s for s in fams["vpq_fsync_seconds"] if s.name == "vpq_fsync_seconds_bucket"]) == 4
    # w1's vpq_shared is a counter where w0's is a gauge: left out, w0's kept
    assert [(s.labels, s.value) for s in fams["vpq_shared"]] == [({"node": "w0"}, 1.0)]


def test_merge_drops_reserved_families_and_repeated_samples() -> None:
    parsed = parse_text(WRITE_TEXT)
    merged = merge_families([({"node": "w0"}, parsed), ({"node": "w0"}, parsed)], reserved=["vpq_shared"])
    fams = families(render(merged))
    assert "vpq_shared" not in fams
    assert [s.value for s in fams["vpq_produced_messages"]] == [5.0]


def test_parse_text_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        parse_text("vpq_x{unclosed 1\n")


def test_real_node_texts_merge_into_valid_exposition() -> None:
    sources = [
        ({"node": "w0", "role": "write"}, parse_text(write_text(3))),
        ({"node": "w1", "role": "write"}, parse_text(write_text(4))),
        ({"node": "r0", "role": "read"}, parse_text(read_text())),
    ]
    text = render(merge_families(sources))
    assert all(n == 1 for n in type_lines(text).values())
    fams = families(text)
    assert {(s.labels["node"], s.value) for s in fams["vpq_produced_messages"]} == {("w0", 3.0), ("w1", 4.0)}
    assert {s.labels["node"] for s in fams["vpq_partition_end_offset"]} == {"w0", "w1"}
    lag = {(s.labels["lane"], s.labels["node"]): s.value for s in fams["vpq_group_lane_lag_messages"]}
    assert lag == {("", "r0"): 3.0, ("feat-a", "r0"): 1.0}
    assert all(s.labels.get("node") for items in fams.values() for s in items)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    """Starts a one-route node (``GET /internal/v1/metrics``); returns its address."""
    servers: list[TestServer] = []

    async def start(handler: Handler) -> str:
        app = web.Application()
        app.router.add_get("/internal/v1/metrics", handler)
        server = TestServer(app)
        await server.start_server()
        servers.append(server)
        return f"{server.host}:{server.port}"

    yield start
    for s in servers:
        await s.close()


def unreachable_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


async def test_scraper_skips_and_counts_nodes_that_do_not_answer(serve) -> None:
    release = asyncio.Event()

    async def good(_r: web.Request) -> web.Response:
        return web.Response(text=write_text(2), content_type="text/plain")

    async def broken(_r: web.Request) -> web.Response:
        return web.Response(status=500, text="boom")

    async def slow(_r: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text=write_text(9), content_type="text/plain")

    async def garbage(_r: web.Request) -> web.Response:
        return web.Response(text="vpq_x{ 1\n", content_type="text/plain")

    nodes = [
        NodeTarget("w0", "write", await serve(good)),
        NodeTarget("w1", "write", await serve(broken)),
        NodeTarget("r0", "read", await serve(slow)),
        NodeTarget("r1", "read", await serve(garbage)),
        NodeTarget("r2", "read", unreachable_address()),
    ]
    own = "# HELP vpq_cluster_map_epoch e\n# TYPE vpq_cluster_map_epoch gauge\nvpq_cluster_map_epoch 3\n"
    async with aiohttp.ClientSession() as session:
        scraper = NodeMetricsScraper(session, timeout_s=0.3)
        await scraper.scrape(own, nodes)
        text = await scraper.scrape(own, nodes)
        release.set()
    assert text.startswith(own)
    assert all(n == 1 for n in type_lines(text).values())
    fams = families(text)
    up = {s.labels["node"]: s.value for s in fams["vpq_node_up"]}
    assert up == {"w0": 1.0, "w1": 0.0, "r0": 0.0, "r1": 0.0, "r2": 0.0}
    errors = {s.labels["node"]: s.value for s in fams["vpq_metrics_scrape_errors"] if s.name.endswith("_total")}
    assert errors == {"w0": 0.0, "w1": 2.0, "r0": 2.0, "r1": 2.0, "r2": 2.0}
    assert {s.labels["node"] for s in fams["vpq_produced_messages"]} == {"w0"}
    assert [s.value for s in fams["vpq_cluster_map_epoch"]] == [3.0]


async def test_gateway_metrics_include_every_node(serve, redis_url, key_prefix) -> None:
    settings = Settings(redis=RedisSettings(key_prefix=key_prefix), cluster=ClusterSettings(physical_partitions=1))
    md = MetadataStore(settings.redis, url=redis_url)
    await md.start()
    texts = {"w0": write_text(5), "r0": read_text()}

    def node(name: str) -> Handler:
        async def handler(_r: web.Request) -> web.Response:
            return web.Response(text=texts[name], content_type="text/plain")

        return handler

    await md.nodes.register_node("w0", "write", await serve(node("w0")), 60_000)
    await md.nodes.register_node("r0", "read", await serve(node("r0")), 60_000)
    backend = ClusterBackend(settings, redis_url)
    await backend.start()
    app = create_app(settings.gateway, backend, queue_defaults=settings.queues, manage_backend=False)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        resp = await client.get("/metrics")
        assert resp.status == 200
        text = await resp.text()
    finally:
        await client.close()
        await backend.stop()
        await md.stop()
    assert all(n == 1 for n in type_lines(text).values()), type_lines(text).most_common(3)
    fams = families(text)  # the whole answer is one valid exposition
    assert "vpq_gateway_requests" in fams and "vpq_cluster_map_epoch" in fams
    assert [(s.labels["node"], s.labels["role"], s.value) for s in fams["vpq_produced_messages"]] == [
        ("w0", "write", 5.0)
    ]
    assert {(s.labels["node"], s.value) for s in fams["vpq_delivered_messages"]} == {("r0", 2.0)}
    assert {s.labels["node"]: s.value for s in fams["vpq_node_up"]} == {"w0": 1.0, "r0": 1.0}
    assert any(s.labels.get("node") == "w0" for s in fams["vpq_fsync_seconds"])
