"""The write node's append lane (``write_nodes.append_lane``) answers what the aiohttp
route answers. A fresh connection's append is the lane's (no ``Server`` header); on a
connection whose first request went to aiohttp, the append is aiohttp's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from yarl import URL

from tests.write_nodes.test_service_helpers import STEADY_LEASE_MS, batch, make_settings, open_metadata, place_queue
from vpq.node_rpc.append_frames import Frame, encode_frames
from vpq.write_nodes.service import WriteNodeService

pytestmark = pytest.mark.timeout(60)

SECRET = "s" * 32


@pytest.fixture
async def secured(tmp_path: Any, redis_url: str, key_prefix: str) -> AsyncIterator[tuple[WriteNodeService, int]]:
    settings = make_settings(tmp_path, key_prefix, write_nodes=2, partitions=4, lease_ttl_ms=STEADY_LEASE_MS)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1, 2, 0])
    service = WriteNodeService(settings, "w0", 0, redis_url, cluster_secret=SECRET)
    await service.start()
    yield service, qid
    await service.stop()
    await md.stop()


async def _post(address: str, body: bytes, headers: dict[str, str], *, via_app: bool) -> tuple[int, Any, bool]:
    """One append on a new connection; with ``via_app`` the connection's first request is
    a GET, which hands it to aiohttp. Answers (status, JSON, answered by aiohttp)."""
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as http:
        if via_app:
            async with http.get(f"http://{address}/internal/v1/partitions", headers={"X-Vpq-Cluster-Secret": SECRET}) as r:
                assert r.status == 200
        async with http.post(f"http://{address}/internal/v1/append", data=body, headers=headers) as r:
            return r.status, orjson.loads(await r.read()), "Server" in r.headers


async def test_lane_and_app_answer_alike(secured: tuple[WriteNodeService, int]) -> None:
    service, qid = secured
    good = encode_frames([Frame(0, batch(qid, [0, 3])), Frame(2, batch(qid, [2]))])
    ok = {"X-Vpq-Cluster-Secret": SECRET, "X-Map-Epoch": "1"}
    cases: list[tuple[str, bytes, dict[str, str]]] = [
        ("no secret", good, {"X-Map-Epoch": "1"}),
        ("wrong secret", good, {"X-Vpq-Cluster-Secret": "x" * 32, "X-Map-Epoch": "1"}),
        ("bad epoch", good, {"X-Vpq-Cluster-Secret": SECRET, "X-Map-Epoch": "-3"}),
        ("malformed frames", b"\x00\x01", ok),
        ("stale map", encode_frames([Frame(0, batch(qid, [1]))]), ok),
        ("not owner", encode_frames([Frame(1, batch(qid, [1]))]), ok),
    ]
    for name, body, headers in cases:
        lane = await _post(service.address, body, headers, via_app=False)
        app = await _post(service.address, body, headers, via_app=True)
        assert (lane[0], lane[1]) == (app[0], app[1]), name
        assert (lane[2], app[2]) == (False, True), name
    lane = await _post(service.address, good, ok, via_app=False)
    app = await _post(service.address, good, ok, via_app=True)
    assert lane[0] == app[0] == 200 and not lane[2] and app[2]
    # both appended, one after the other: offsets continue
    assert lane[1]["results"] == [{"base_offset": 0, "last_offset": 1}, {"base_offset": 0, "last_offset": 0}]
    assert app[1]["results"] == [{"base_offset": 2, "last_offset": 3}, {"base_offset": 1, "last_offset": 1}]


async def _get(address: str, target: str, headers: dict[str, str], *, via_app: bool) -> tuple[int, bytes, dict[str, str], bool]:
    """One GET on a new connection (``via_app``: after a first request that hands the
    connection to aiohttp). Answers (status, body, offset and content headers, by aiohttp)."""
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as http:
        if via_app:
            async with http.get(f"http://{address}/internal/v1/partitions", headers={"X-Vpq-Cluster-Secret": SECRET}) as r:
                assert r.status == 200
        async with http.get(URL(f"http://{address}{target}", encoded=True), headers=headers) as r:  # sent as written
            kept = {k: r.headers[k] for k in ("X-Start-Offset", "X-End-Offset", "Content-Type", "Retry-After") if k in r.headers}
            return r.status, await r.read(), kept, "Server" in r.headers


async def test_reads_through_the_lane_answer_as_the_app(secured: tuple[WriteNodeService, int]) -> None:
    service, qid = secured
    ok = {"X-Vpq-Cluster-Secret": SECRET, "X-Map-Epoch": "1"}
    assert (await _post(service.address, encode_frames([Frame(0, batch(qid, [0, 3]))]), ok, via_app=False))[0] == 200
    secret = {"X-Vpq-Cluster-Secret": SECRET}
    base = "/internal/v1/partitions"
    cases: list[tuple[str, str, dict[str, str], bool]] = [  # name, target, headers, taken by the lane
        ("whole batch", f"{base}/0/read?offset=0&max_bytes=1048576&wait_ms=0", secret, True),
        ("from the second record", f"{base}/0/read?offset=1", secret, True),
        ("first value wins", f"{base}/0/read?offset=0&offset=9&wait_ms=0", secret, True),
        ("long poll times out", f"{base}/0/read?offset=2&wait_ms=30", secret, True),
        ("no offset", f"{base}/0/read?max_bytes=10", secret, True),
        ("bad offset", f"{base}/0/read?offset=x", secret, True),
        ("negative wait", f"{base}/0/read?offset=0&wait_ms=-1", secret, True),
        ("empty parameter", f"{base}/0/read?offset=0&wait_ms", secret, True),
        ("not owner", f"{base}/1/read?offset=0", secret, True),
        ("no secret", f"{base}/0/read?offset=0", {}, True),
        ("escaped query", f"{base}/0/read?offset=%30", secret, False),
        ("not a partition", f"{base}/x/read?offset=0", secret, False),
    ]
    for name, target, headers, in_lane in cases:
        lane = await _get(service.address, target, headers, via_app=False)
        app = await _get(service.address, target, headers, via_app=True)
        assert lane[:3] == app[:3], name
        assert (lane[3], app[3]) == (not in_lane, True), name
    status, body, kept, _ = await _get(service.address, f"{base}/0/read?offset=0&wait_ms=0", secret, via_app=False)
    assert status == 200 and body and kept["X-End-Offset"] == "2" and kept["Content-Type"] == "application/octet-stream"
