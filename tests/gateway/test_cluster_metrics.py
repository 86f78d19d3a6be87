"""Node metrics in the gateway: the pure family merge, the scraper against the real nodes
of a live platform (``tests/live_platform.py``: one healthy node, the others behind a
recording proxy that fails, stalls or answers garbage, and one unreachable address),
and ``GET /metrics`` of the platform's gateway over its write and read node: one valid
exposition, one HELP/TYPE per family, every node series labelled with its node."""

from __future__ import annotations

import asyncio
import re
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.integration.api import Api
from tests.live_platform import LivePlatform, platform_settings, running
from tests.recording_proxy import Recorded, RecordingProxy
from vpq.gateway.cluster_metrics import NodeMetricsScraper, NodeTarget, merge_families, parse_text, render
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
    m.delivered("orders", "g", 2, 1)
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


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivePlatform]:
    """One write node (w0) and one read node (r0) over one partition: 5 messages produced
    to "orders", 2 of them delivered to group "g"."""
    with running(platform_settings(tmp_path_factory.mktemp("metrics"), physical_partitions=1)) as platform:
        api = Api(platform.url)
        api.put_queue("orders", virtual_partitions=1)
        api.produce("orders", [{"value": i} for i in range(5)])
        cid = api.join("orders", "g", start="earliest")
        got: list[dict] = []
        for _ in range(50):
            got += api.poll("orders", "g", cid, max_messages=2 - len(got), wait_ms=200)
            if len(got) == 2:
                break
        assert len(got) == 2
        yield platform


@pytest.fixture
async def proxied() -> AsyncIterator[Callable[[str], Awaitable[tuple[RecordingProxy, str]]]]:
    """Starts a recording proxy in front of a node address; returns (proxy, its address)."""
    servers: list[TestServer] = []

    async def start(address: str) -> tuple[RecordingProxy, str]:
        proxy = RecordingProxy(f"http://{address}")
        server = TestServer(proxy.app(), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return proxy, f"127.0.0.1:{server.port}"

    yield start
    for s in servers:
        await s.close()


def unreachable_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


async def test_scraper_skips_and_counts_nodes_that_do_not_answer(live: LivePlatform, proxied) -> None:
    release = asyncio.Event()
    writer, reader = live.writers[0].address, live.readers[0].address
    broken, broken_address = await proxied(writer)
    broken.fail("GET", r"/metrics$", 500, "boom", times=2)
    slow, slow_address = await proxied(reader)

    async def stall(_request: Recorded) -> None:
        await release.wait()

    slow.before(r"/metrics$", stall)
    garbage, garbage_address = await proxied(reader)
    garbage.fail("GET", r"/metrics$", 200, "garbage", times=2)  # a 200 whose body is JSON, not Prometheus text
    nodes = [
        NodeTarget("w0", "write", writer),
        NodeTarget("w1", "write", broken_address),
        NodeTarget("r0", "read", slow_address),
        NodeTarget("r1", "read", garbage_address),
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


async def test_gateway_metrics_include_every_node(live: LivePlatform) -> None:
    async with aiohttp.ClientSession() as session, session.get(f"{live.url}/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    assert all(n == 1 for n in type_lines(text).values()), type_lines(text).most_common(3)
    fams = families(text)  # the whole answer is one valid exposition
    assert "vpq_gateway_requests" in fams and "vpq_cluster_map_epoch" in fams
    assert [(s.labels["node"], s.labels["role"], s.value) for s in fams["vpq_produced_messages"]] == [
        ("w0", "write", 5.0)
    ]
    assert {(s.labels["node"], s.value) for s in fams["vpq_delivered_messages"]} == {("r0", 2.0)}
    assert {s.labels["node"]: s.value for s in fams["vpq_node_up"]} == {"w0": 1.0, "r0": 1.0}
    assert any(s.labels.get("node") == "w0" for s in fams["vpq_fsync_seconds"])
