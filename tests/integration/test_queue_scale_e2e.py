"""Queues at scale on a real platform (in-process roles, real redis-server): creating queues
costs the nodes no memory, a queue is loaded where traffic comes, and the whole map is
still served in the contract's shape."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.live_platform import LivePlatform, platform_settings, running

QUEUES = 300


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivePlatform]:
    with running(platform_settings(Path(tmp_path_factory.mktemp("vpq")), physical_partitions=4)) as p:
        yield p


def test_idle_queues_are_not_held_and_traffic_loads_them(live: LivePlatform) -> None:
    http = requests.Session()
    names = [f"idle-{i:04d}" for i in range(QUEUES)]
    for n in names:
        assert http.put(f"{live.url}/v1/queues/{n}", json={"virtual_partitions": 2}, timeout=10).status_code in (200, 201)
    writer, reader = live.writers[0], live.readers[0]
    wcache = writer._cache
    rcache = reader.parts.map_cache
    assert wcache is not None and rcache is not None
    assert len(wcache) == 0 and len(rcache) == 0  # nothing of 300 new queues held by the nodes
    epoch = live.run(_epoch(live))
    assert wcache.epoch <= epoch
    # the first produce to each of a few queues loads it where it is needed, and only it
    for n in names[:5]:
        r = http.post(f"{live.url}/v1/queues/{n}/messages", json={"messages": [{"key": "k", "value": n}]}, timeout=10)
        assert r.status_code == 200, r.text
    assert {q.name for q in wcache.queues()} == set(names[:5])
    assert len(rcache) == 0
    # the whole map is still answered in the contract's shape, placing every queue
    m = http.get(f"{live.url}/v1/maps/current", timeout=10).json()
    assert set(m) == {"epoch", "queues"} and m["epoch"] >= epoch
    assert set(names) <= set(m["queues"])
    for n in names[:20]:
        info = http.get(f"{live.url}/v1/queues/{n}", timeout=10).json()
        assert info["placement"] == m["queues"][n]["placement"] and len(info["placement"]) == 2
    # a deleted queue leaves the map and the nodes' caches
    assert http.delete(f"{live.url}/v1/queues/{names[0]}", timeout=10).status_code in (200, 204)
    m = http.get(f"{live.url}/v1/maps/current", timeout=10).json()
    assert names[0] not in m["queues"]
    r = http.post(f"{live.url}/v1/queues/{names[0]}/messages", json={"messages": [{"value": 1}]}, timeout=10)
    assert r.status_code == 404


async def _epoch(live: LivePlatform) -> int:
    from vpq.metadata.store import MetadataStore

    md = MetadataStore(live.settings.redis, url=live.redis_url)
    try:
        return await md.maps.epoch()
    finally:
        await md.stop()
