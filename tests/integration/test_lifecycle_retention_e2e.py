"""Per-queue retention against the log's own on a running platform (real processes): a
segment is not deleted while a queue with records in it is within its retention, even
when the log's retention says delete; the other queue's expired records are compacted
away around the kept ones, at their offsets."""

from __future__ import annotations

import time

import pytest

from tests.integration.api import Api
from tests.integration.platform import Platform

ENV = {
    "VPQ_QUEUES__SESSION_TIMEOUT_MS": "15000",
    "VPQ_REDIS__LEASE_TTL_MS": "2000",
    "VPQ_LOG__SEGMENT_BYTES": str(16 * 1024),
    "VPQ_LOG__CHECKPOINT_INTERVAL_MS": "200",
    "VPQ_LOG__COMPACTION_INTERVAL_MS": "500",
    "VPQ_LOG__RETENTION_MS": "1500",
}


@pytest.fixture(scope="module")
def platform(tmp_path_factory):
    yield from Platform(tmp_path_factory.mktemp("vpq"), physical_partitions=1, env=dict(ENV)).running()


def test_a_segment_stays_while_a_queue_in_it_is_within_its_retention(platform: Platform) -> None:
    api = Api(platform.url)
    api.put_queue("keeper", virtual_partitions=1, retention_ms=600_000)
    api.put_queue("plain", virtual_partitions=1)  # no retention of its own: the log's 1.5 s
    kept: list[str] = []
    for i in range(40):
        api.produce("plain", [{"key": "p", "value": "x" * 800} for _ in range(9)])
        kept += [r["id"] for r in api.produce("keeper", [{"key": "k", "value": {"i": i}}])]
    part = api.cluster()["physical_partitions"][0]
    before = part["bytes"]
    assert part["end_offset"] >= 400 and before > 8 * 16 * 1024  # many segments
    time.sleep(4.0)  # past the log's retention: several retention and compaction passes
    part = api.cluster()["physical_partitions"][0]
    assert part["start_offset"] == 0, "a segment holding keeper's records was deleted"
    assert part["bytes"] < 0.3 * before, "plain's expired records were not compacted away"
    cid = api.join("keeper", "g")
    got: list[dict] = []
    deadline = time.monotonic() + 20
    while len(got) < len(kept) and time.monotonic() < deadline:
        batch = api.poll("keeper", "g", cid, max_messages=100, wait_ms=300)
        if batch:
            api.ack("keeper", "g", cid, [m["id"] for m in batch])
        got += batch
    assert [m["id"] for m in got] == kept, api.group("keeper", "g")
    assert [m["value"]["i"] for m in got] == list(range(40))
    assert api.group("keeper", "g")["expired"] == 0
