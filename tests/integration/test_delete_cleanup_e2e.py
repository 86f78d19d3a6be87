"""Deleting a queue on a running platform removes every Redis key it and its groups own
(registry entries, lineage, group records, members, start offsets, ack state, leases,
fence counters), and nothing of another queue. Keys are listed with SCAN before and after."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis

from tests.integration.api import Api
from tests.integration.platform import Platform
from vpq.common.runfiles import read_redis_url

PREFIX = "vpq"  # the default key prefix of ``vpq up``


@pytest.fixture(scope="module")
def rds(platform: Platform) -> Iterator[redis.Redis]:
    r = redis.Redis.from_url(read_redis_url(platform.data_dir), decode_responses=True)
    yield r
    r.close()


def _keys(r: redis.Redis) -> set[str]:
    return set(r.scan_iter(match=f"{PREFIX}:*", count=1000))


def _owned_by(queue: str, keys: set[str]) -> set[str]:
    """Keys whose name holds ``queue`` as a component (``p:lineage:q``, ``p:group:q:g:members``,
    ``p:lease:group:q:g``, ...)."""
    return {k for k in keys if f":{queue}:" in k or k.endswith(f":{queue}")}


def _wait_for(check, what: str, timeout_s: float = 20.0):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            assert got, f"timed out waiting for {what}"
            return got
        time.sleep(0.1)


def _consume_some(api: Api, queue: str, group: str, n: int) -> None:
    """Join, poll and ack all but the first message (so the ack state lists it)."""
    cid = api.join(queue, group, start="earliest")
    got: list[dict] = []
    deadline = time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        got += api.poll(queue, group, cid, max_messages=n, wait_ms=500)
    assert len(got) == n
    assert api.ack(queue, group, cid, [m["id"] for m in got[1:]]) == n - 1


def test_queue_delete_removes_every_key_of_the_queue_and_its_groups(api: Api, rds: redis.Redis) -> None:
    for q in ("gone", "kept"):
        api.put_queue(q, virtual_partitions=2)
        api.produce(q, [{"key": f"k{i}", "value": {"i": i}} for i in range(6)])
    _consume_some(api, "gone", "g1", 6)
    _consume_some(api, "gone", "g2", 6)
    _consume_some(api, "kept", "g1", 6)

    wanted = [
        f"{PREFIX}:lineage:gone",
        f"{PREFIX}:groups:gone",
        *(f"{PREFIX}:{kind}" for g in ("g1", "g2") for kind in (
            f"group:gone:{g}", f"group:gone:{g}:members", f"group:gone:{g}:deadlines",
            f"ackstate:gone:{g}", f"lease:group:gone:{g}", f"fence:group:gone:{g}",
        )),
    ]  # fmt: skip
    # the ack state is persisted in the background: wait for kept's too
    wanted += [f"{PREFIX}:ackstate:kept:g1", f"{PREFIX}:lease:group:kept:g1"]
    before = _wait_for(lambda: (k := _keys(rds)) >= set(wanted) and k, "the ack state and leases of both queues")
    kept_before = _owned_by("kept", before)
    assert f"{PREFIX}:ackstate:kept:g1" in kept_before and f"{PREFIX}:lease:group:kept:g1" in kept_before
    assert rds.hexists(f"{PREFIX}:queues", "gone")

    api.call("DELETE", "/v1/queues/gone", expect=None).raise_for_status()
    time.sleep(3.0)  # read nodes drop the group, leases would have been renewed, acks persisted...

    after = _keys(rds)
    assert _owned_by("gone", after) == set(), sorted(_owned_by("gone", after))
    durable = {k for k in kept_before if not k.endswith((":members", ":deadlines")) and ":lease:" not in k}
    assert _owned_by("kept", after) >= durable  # nothing of the other queue went (sessions may expire)
    assert not rds.hexists(f"{PREFIX}:queues", "gone") and rds.hexists(f"{PREFIX}:queues", "kept")
    assert "gone" not in set(rds.hvals(f"{PREFIX}:queue_ids"))
    assert not rds.hexists(f"{PREFIX}:map:queues", "gone") and rds.hexists(f"{PREFIX}:map:queues", "kept")
    assert rds.zscore(f"{PREFIX}:map:changes", "gone") is not None  # its tombstone: nodes learn that it went
    # what is left beyond the other queue's keys is cluster-wide, owned by no queue
    assert after - _owned_by("kept", after) <= (before - _owned_by("gone", before) - kept_before) | {
        f"{PREFIX}:fence_floor"
    }
