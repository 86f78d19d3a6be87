"""``vpq up --set ...``: the values reach the child processes and change what they do."""

from __future__ import annotations

import json
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.api import Api
from tests.integration.conftest import FAST
from tests.integration.platform import Platform

pytestmark = pytest.mark.integration

CACHE_BYTES = 16384


def _read_node_cache_bytes(url: str) -> float | None:
    text = requests.get(url + "/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        if family.name == "vpq_record_cache_bytes":
            for sample in family.samples:
                if sample.labels.get("role") == "read":
                    return sample.value
    return None


def test_set_reaches_the_children(tmp_path):
    p = Platform(
        tmp_path / "vpq", physical_partitions=2, env=dict(FAST),
        extra_args=[
            "--set", f"read_nodes.cache_bytes={CACHE_BYTES}",
            "--set", "queues.virtual_partitions=8",
            "--set", "produce.retry_after_s=2.5",
        ],
    )
    p.start()
    try:
        written = json.loads((p.data_dir / "run" / "settings.json").read_text())
        assert written["read_nodes"]["cache_bytes"] == CACHE_BYTES
        assert written["produce"]["retry_after_s"] == 2.5
        api = Api(p.url)
        api.put_queue("s")
        assert api.call("GET", "/v1/queues/s").json()["virtual_partitions"] == 8  # the gateway child
        ids = {r["id"] for r in api.produce("s", [{"key": f"k{i}", "value": "x" * 100} for i in range(200)])}
        cid = api.join("s", "g")
        seen: set[str] = set()
        deadline = time.monotonic() + 30
        while len(seen) < len(ids) and time.monotonic() < deadline:
            batch = api.poll("s", "g", cid, max_messages=500, wait_ms=300)
            if batch:
                api.ack("s", "g", cid, [m["id"] for m in batch])
                seen.update(m["id"] for m in batch)
        assert seen == ids
        # the read node's cache holds at most what --set allows (200 such records take about 116 KB)
        cached = _read_node_cache_bytes(p.url)
        assert cached is not None and 0 < cached <= CACHE_BYTES
    finally:
        rc = p.stop()
    assert rc == 0
