"""Data lifecycle on a running platform (real processes): per-queue retention counted
as ``expired`` per group, compaction giving a deleted queue's disk back while produce
and consume go on, and queue delete taking its dead-letter queues with it."""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.api import Api
from tests.integration.platform import Platform

FAST = {
    "VPQ_QUEUES__SESSION_TIMEOUT_MS": "15000",
    "VPQ_REDIS__LEASE_TTL_MS": "2000",
    "VPQ_LOG__SEGMENT_BYTES": str(64 * 1024),
    "VPQ_LOG__CHECKPOINT_INTERVAL_MS": "200",
    "VPQ_LOG__COMPACTION_INTERVAL_MS": "1000",
}


@pytest.fixture(scope="module")
def platform(tmp_path_factory):
    yield from Platform(tmp_path_factory.mktemp("vpq"), physical_partitions=1, env=dict(FAST)).running()


@pytest.fixture
def api(platform):
    return Api(platform.url)


def _wait_for(check, what: str, timeout_s: float = 30.0):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got or time.monotonic() > deadline:
            assert got, f"timed out waiting for {what}"
            return got
        time.sleep(0.2)


def _drain(api: Api, queue: str, group: str, cid: str, n: int, timeout_s: float = 30.0) -> list[dict]:
    got: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        batch = api.poll(queue, group, cid, max_messages=500, wait_ms=500)
        if batch:
            api.ack(queue, group, cid, [m["id"] for m in batch])
        got += batch
    return got


def test_messages_past_retention_are_never_delivered_and_count_as_expired(api: Api) -> None:
    api.put_queue("short", virtual_partitions=2, retention_ms=2000)
    early = api.join("short", "early")  # joined before: consumes everything in time
    waiting = api.join("short", "waiting")  # joined, but polls only once the messages are old
    api.produce("short", [{"key": f"k{i}", "value": {"i": i}} for i in range(8)])
    assert len(_drain(api, "short", "early", early, 8)) == 8
    time.sleep(2.5)
    late = api.join("short", "late")  # created after the messages expired
    assert api.poll("short", "late", late, max_messages=100, wait_ms=300) == []
    assert api.poll("short", "waiting", waiting, max_messages=100, wait_ms=300) == []
    fresh = api.produce("short", [{"key": "k0", "value": {"fresh": True}}])
    for group, cid in (("late", late), ("waiting", waiting), ("early", early)):
        got = _drain(api, "short", group, cid, 1)
        assert [m["id"] for m in got] == [fresh[0]["id"]], group
    assert _wait_for(lambda: api.group("short", "late")["expired"] == 8, "late's expired count")
    assert api.group("short", "waiting")["expired"] == 8
    assert api.group("short", "early")["expired"] == 0
    # the count outlives the group's host: it is kept with the group
    metrics = api.call("GET", "/metrics").text
    assert "vpq_expired_messages" in metrics


def _partition_bytes(api: Api) -> int:
    return sum(p["bytes"] for p in api.cluster()["physical_partitions"])


def test_deleting_a_queue_gives_its_disk_back_while_produce_and_consume_go_on(api: Api) -> None:
    api.put_queue("bulk", virtual_partitions=2)
    api.put_queue("keep", virtual_partitions=2)
    keep_ids: list[str] = []
    payload = "x" * 900
    for i in range(30):
        api.produce("bulk", [{"key": f"b{j}", "value": payload} for j in range(45)])
        keep_ids += [r["id"] for r in api.produce("keep", [{"key": f"k{i}", "value": payload} for _ in range(5)])]
    before = _partition_bytes(api)
    assert before > 1_000_000
    stop = threading.Event()
    during: list[str] = []
    errors: list[BaseException] = []

    def producer() -> None:
        try:
            while not stop.is_set():
                during.extend(r["id"] for r in api.produce("keep", [{"key": "d", "value": "during"}]))
                time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    worker = threading.Thread(target=producer)
    worker.start()
    try:
        cid = api.join("keep", "g")
        first = _drain(api, "keep", "g", cid, 60)
        api.call("DELETE", "/v1/queues/bulk", expect=None).raise_for_status()
        _wait_for(lambda: _partition_bytes(api) <= 0.2 * before, "the partition to shrink to 20 %", timeout_s=30)
        rest = _drain(api, "keep", "g", cid, len(keep_ids) - len(first))
    finally:
        stop.set()
        worker.join()
    assert not errors, errors
    got = [m["id"] for m in first + rest]
    # offsets are stable: every id (partition + offset) produced is one consumed
    assert set(keep_ids) <= set(got)
    by_key: dict[str, list[str]] = {}
    for m in first + rest:
        by_key.setdefault(m["key"], []).append(m["id"])
    order = {mid: i for i, mid in enumerate(keep_ids)}
    for key, ids in by_key.items():  # each key's messages in produce order
        seen = [order[i] for i in ids if i in order]
        assert seen == sorted(seen), key
    tail = _drain(api, "keep", "g", cid, len(during) - len(set(during) & set(got)))
    assert set(during) <= set(got) | {m["id"] for m in tail}


def test_queue_delete_removes_its_dead_letter_queues(api: Api) -> None:
    api.put_queue("flaky", virtual_partitions=1, max_deliveries=1)
    api.produce("flaky", [{"key": "a", "value": 1}])
    cid = api.join("flaky", "g")
    got = _drain_nack(api, cid)
    assert got
    _wait_for(lambda: api.call("GET", "/v1/queues/flaky.g.dlq", expect=None).status_code == 200, "the DLQ")
    dlq_cid = api.join("flaky.g.dlq", "readers")
    assert len(_drain(api, "flaky.g.dlq", "readers", dlq_cid, 1)) == 1
    api.call("DELETE", "/v1/queues/flaky", expect=None).raise_for_status()
    assert api.call("GET", "/v1/queues/flaky.g.dlq", expect=None).status_code == 404
    assert api.call("GET", "/v1/queues/flaky.g.dlq/groups/readers", expect=None).status_code == 404
    names = {q["name"] for q in api.call("GET", "/v1/queues").json()["queues"]}
    assert not {"flaky", "flaky.g.dlq"} & names


def _drain_nack(api: Api, cid: str) -> list[dict]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        batch = api.poll("flaky", "g", cid, max_messages=10, wait_ms=500)
        if batch:
            api.nack("flaky", "g", cid, [m["id"] for m in batch])
            return batch
    return []
