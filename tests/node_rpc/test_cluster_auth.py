"""The cluster secret on real nodes: every internal route of the write and read node
apps (enumerated from their routers, so a route added later is covered) refuses a call
without the secret or with another one, and changes nothing; the roles' own calls carry
it (produce, consume and replication work)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import requests
from aiohttp import web

from tests.live_platform import LivePlatform, platform_settings, running
from vpq.common.errors import InternalError
from vpq.config.settings import ClusterSettings
from vpq.node_rpc.call import CLUSTER_SECRET_MISMATCH, call_node
from vpq.node_rpc.cluster_auth import (
    BAD_CLUSTER_SECRET,
    CLUSTER_SECRET_HEADER,
    CLUSTER_SECRET_REQUIRED,
    OPEN_PATHS,
    check_cluster_secret,
    client_headers,
)

SECRET = "s3cret-" + "ab" * 16
PARAMS = {"pp": "0", "queue": "q", "group": "g", "consumer_id": "c0"}
REFUSALS = [({}, CLUSTER_SECRET_REQUIRED), ({CLUSTER_SECRET_HEADER: SECRET + "x"}, BAD_CLUSTER_SECRET)]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivePlatform]:
    settings = platform_settings(Path(tmp_path_factory.mktemp("secret")), write_nodes=2, physical_partitions=2)
    cluster = ClusterSettings(write_nodes=2, read_nodes=1, physical_partitions=2, replication_factor=2)
    with running(settings.model_copy(update={"cluster": cluster}), cluster_secret=SECRET) as p:
        yield p


def node_routes(app: web.Application) -> list[tuple[str, str]]:
    """(method, concrete path) of every route of ``app``, its parameters filled in."""
    out = []
    for route in app.router.routes():
        path = re.sub(r"\{(\w+)(:[^}]*)?\}", lambda m: PARAMS[m.group(1)], route.resource.canonical)
        out.append((route.method, path))
    return out


def every_route(live: LivePlatform) -> list[tuple[str, str, str]]:
    """(node address, method, path) for every route of every node of ``live`` but the
    health checks (``OPEN_PATHS``)."""
    nodes = [*live.writers, *live.readers]
    routes = [(n.address, m, p) for n in nodes for m, p in node_routes(n._runner.app)]  # noqa: SLF001
    return [r for r in routes if r[2] not in OPEN_PATHS]


def snapshot(live: LivePlatform) -> tuple:
    """What a call could change: the partitions' ends on every write node, the group."""
    auth = client_headers(SECRET)
    ends = []
    for w in live.writers:
        parts = requests.get(f"http://{w.address}/internal/v1/partitions", headers=auth, timeout=10).json()
        ends.append(sorted((p["id"], p.get("next_offset"), p.get("high_watermark")) for p in parts["partitions"]))
    group = requests.get(f"{live.url}/v1/queues/q/groups/g", timeout=10).json()
    group["lag"].pop("oldest_unacked_age_ms", None)  # grows with time
    return ends, group["members"], group["lag"]


def test_the_roles_calls_carry_the_secret(live: LivePlatform) -> None:
    assert requests.put(f"{live.url}/v1/queues/q", json={}, timeout=10).status_code in (200, 201)
    msgs = [{"key": f"k{i}", "value": i} for i in range(20)]
    r = requests.post(f"{live.url}/v1/queues/q/messages", json={"messages": msgs}, timeout=30)
    assert r.status_code == 200, r.text
    base = f"{live.url}/v1/queues/q/groups/g/consumers"
    cid = requests.post(base, json={"consumer_id": "c0"}, timeout=10).json()["consumer_id"]
    got: list = []
    deadline = time.monotonic() + 20
    while len(got) < 20 and time.monotonic() < deadline:
        got += requests.post(f"{base}/{cid}/poll", json={"wait_ms": 500}, timeout=10).json()["messages"]
    assert sorted(m["value"] for m in got) == list(range(20))
    deadline = time.monotonic() + 20
    while True:  # the followers fetch from their leaders with the secret
        parts = requests.get(f"{live.url}/v1/cluster", timeout=10).json()["physical_partitions"]
        if all(len(p["in_sync_replicas"]) == 2 for p in parts) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert [sorted(p["in_sync_replicas"]) for p in parts] == [["w0", "w1"], ["w0", "w1"]]
    text = requests.get(f"{live.url}/metrics", timeout=10).text  # the gateway scrapes the nodes
    for node, role in (("w0", "write"), ("w1", "write"), ("r0", "read")):
        assert f'vpq_node_up{{node="{node}",role="{role}"}} 1.0' in text


def test_every_internal_route_refuses_a_call_without_the_secret(live: LivePlatform) -> None:
    routes = every_route(live)
    templates = {(m, p) for _, m, p in routes}
    for known in ["/internal/v1/append", "/internal/v1/partitions/0/fence", "/internal/v1/replica/fetch",
                  "/internal/v1/queues/q/groups/g/consumers/c0/ack", "/internal/v1/status"]:
        assert ("POST", known) in templates or ("GET", known) in templates, known
    before = snapshot(live)
    unknown = [(a, "GET", "/internal/v1/nothing-here") for a, _, _ in routes[:1]]
    for address, method, path in routes + unknown:
        for headers, code in REFUSALS:
            r = requests.request(method, f"http://{address}{path}", json={}, headers=headers, timeout=10)
            assert r.status_code == 401, (method, path, r.status_code, r.text)
            if method != "HEAD":
                assert r.json()["error"]["code"] == code, (method, path)
    assert snapshot(live) == before


def test_every_internal_route_takes_a_call_with_the_secret(live: LivePlatform) -> None:
    for address, method, path in every_route(live):
        r = requests.request(method, f"http://{address}{path}", json={}, headers=client_headers(SECRET), timeout=10)
        assert r.status_code != 401, (method, path, r.text)


def test_check_cluster_secret() -> None:
    check_cluster_secret(SECRET, SECRET)
    for presented in (None, "", SECRET[:-1], SECRET + " "):
        with pytest.raises(Exception) as info:
            check_cluster_secret(SECRET, presented)
        assert info.value.status == 401


@pytest.mark.parametrize("secret", [None, "another"])
def test_a_refused_secret_is_a_500_for_the_caller(live: LivePlatform, secret: str | None) -> None:
    """A client with no or another secret gets a server error naming the node, never the
    node's 401 (which would read as the user's bad token once relayed by the gateway)."""

    async def call() -> None:
        async with aiohttp.ClientSession(headers=client_headers(secret)) as session:
            await call_node(session, "GET", live.writers[0].address, "/internal/v1/partitions", role="write", timeout_s=5)

    with pytest.raises(InternalError) as info:
        asyncio.run(call())
    assert info.value.status == 500 and info.value.code == CLUSTER_SECRET_MISMATCH
    assert live.writers[0].address in info.value.message and SECRET not in info.value.message
