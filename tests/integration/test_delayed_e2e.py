"""Delayed and priority messages against a real `vpq up` (docs/api.md, additions):
no group receives a delayed message before its due time; within its key a delayed
message takes its place by due time; among ready messages higher priority comes
first, and priority never reorders a key; a read node killed with SIGKILL is
replaced by one that rebuilds its timers from the log and delivers every delayed
message, on time."""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from tests.integration.api import Api, unique_name
from tests.integration.conftest import FAST
from tests.integration.platform import Platform
from vpq.common.runfiles import read_redis_url
from vpq.metadata.acks import decode_state
from vpq.metadata.keys import Keys

pytestmark = pytest.mark.integration


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def consume(api: Api, q: str, cid: str, want: int, timeout_s: float, max_messages: int = 100) -> list[tuple[int, dict]]:
    """Poll and ack until ``want`` messages came; returns ``(receipt wall ms, message)``."""
    got: list[tuple[int, dict]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        batch = api.poll(q, "g", cid, max_messages=max_messages, wait_ms=200)
        now = wall_ms()
        got += [(now, m) for m in batch]
        if batch:
            assert api.ack(q, "g", cid, [m["id"] for m in batch]) == len(batch)
    return got


def test_no_group_receives_a_delayed_message_before_its_due_time(api):
    q = unique_name("delay")
    api.put_queue(q, virtual_partitions=4)
    cid = api.join(q, "g")
    t0 = wall_ms()
    msgs = [{"key": f"d{i}", "value": i, "delay_ms": 1500} for i in range(10)]
    msgs += [{"key": f"a{i}", "value": 100 + i, "deliver_at_ms": t0 + 2500} for i in range(10)]
    msgs += [{"key": f"n{i}", "value": 200 + i} for i in range(10)]
    produced = api.produce(q, msgs)
    got = consume(api, q, cid, 30, 15)
    assert sorted(m["id"] for _, m in got) == sorted(r["id"] for r in produced)  # each once
    for at, m in got:
        assert not any(name.startswith(":") for name in m["headers"])  # reserved headers stay inside
        if m["value"] < 100:
            assert at >= t0 + 1500, f"{m['id']} came {t0 + 1500 - at} ms before its delay ran out"
        elif m["value"] < 200:
            assert at >= t0 + 2500, f"{m['id']} came {t0 + 2500 - at} ms before deliver_at_ms"
    first_immediate = min(at for at, m in got if m["value"] >= 200)
    assert first_immediate < t0 + 1500, "immediate messages waited for the delayed ones"
    assert api.group(q, "g")["lag"]["total"] == 0


def test_within_a_key_a_delayed_message_takes_its_place_by_due_time(api):
    q = unique_name("keyorder")
    api.put_queue(q, virtual_partitions=4)
    cid = api.join(q, "g")
    t0 = wall_ms()
    api.produce(q, [
        {"key": "k", "value": "late", "delay_ms": 2500},
        {"key": "k", "value": "early"},
        {"key": "k", "value": "mid", "delay_ms": 1200},
    ])
    got = consume(api, q, cid, 2, 10)
    assert [m["value"] for _, m in got] == ["early", "mid"]  # neither waits for "late" (logged first)
    assert got[0][0] < t0 + 1200 <= got[1][0]
    time.sleep(max(0.0, (t0 + 3000 - wall_ms()) / 1000))  # "late" is due: it joins the key now
    api.produce(q, [{"key": "k", "value": "after"}])
    got = consume(api, q, cid, 2, 10)
    assert [m["value"] for _, m in got] == ["late", "after"]
    assert got[0][0] >= t0 + 2500


def test_higher_priority_first_across_keys(api):
    q = unique_name("prio")
    api.put_queue(q, virtual_partitions=4)
    cid = api.join(q, "g")
    msgs = [{"key": f"k{i}", "value": i, "priority": (i * 7) % 10} for i in range(40)]
    api.produce(q, msgs)  # one request: ingested together, before the poll below
    time.sleep(0.5)
    got = consume(api, q, cid, 40, 10)
    prios = [(m["value"] * 7) % 10 for _, m in got]
    assert len(got) == 40
    assert prios == sorted(prios, reverse=True), prios


def test_priority_never_reorders_a_key(api):
    q = unique_name("prio-key")
    api.put_queue(q, virtual_partitions=4)
    cid = api.join(q, "g")
    msgs = [{"key": "k", "value": f"k{i}", "priority": p} for i, p in enumerate([0, 9, 0, 9, 5])]
    msgs += [{"key": "hi", "value": "hi", "priority": 5}, {"key": "lo", "value": "lo", "priority": 1}]
    api.produce(q, msgs)
    time.sleep(0.5)
    got = [m["value"] for _, m in consume(api, q, cid, 7, 10)]
    # the key's run starts with its head (priority 0): it comes last, in the key's order
    assert got == ["hi", "lo", "k0", "k1", "k2", "k3", "k4"], got


def test_a_killed_read_node_is_replaced_and_every_delayed_message_comes_on_time(tmp_path):
    env = dict(FAST)
    env["VPQ_READ_NODES__PERSIST_INTERVAL_MS"] = "50"
    p = Platform(tmp_path / "vpq", physical_partitions=2, read_nodes=1, env=env)
    p.start()
    try:
        api = Api(p.url)
        q = f"restart-{uuid.uuid4().hex[:6]}"
        api.put_queue(q, virtual_partitions=8, visibility_timeout_ms=5000)
        cid = api.join(q, "g")
        t0 = wall_ms()
        delay = 9000
        delayed = api.produce(q, [{"key": f"k{i % 20}", "value": i, "delay_ms": delay} for i in range(300)])
        immediate = api.produce(q, [{"key": f"k{i % 20}", "value": 1000 + i} for i in range(100)])
        first = consume(api, q, cid, 100, 10)
        assert sorted(m["id"] for _, m in first) == sorted(r["id"] for r in immediate)
        time.sleep(0.3)  # the acks are persisted (every 50 ms)
        r = redis.Redis.from_url(read_redis_url(p.data_dir), decode_responses=True)
        try:
            states = [decode_state(blob)[2] for blob in r.hgetall(Keys("vpq").acks(q, "g")).values()]
        finally:
            r.close()
        # 300 delayed messages wait, but the state lists none of them: each stream names its earliest
        assert sum(len(st.pending_below) for st in states) == 0
        assert sum(st.delayed is not None for st in states) >= 1
        victims = p.children("vpq.read_nodes.main")
        assert len(victims) == 1
        victims[0].kill()  # SIGKILL: the supervisor starts a new read node
        cid = api.join(q, "g", retry_s=30)
        got = consume(api, q, cid, 300, 30)
        ids = [m["id"] for _, m in got]
        assert sorted(set(ids)) == sorted(r["id"] for r in delayed), "a delayed message was lost"
        due = t0 + delay
        early = [(m["id"], due - at) for at, m in got if at < due]
        assert not early, f"delivered before their due time: {early[:5]}"
        late = max(at for at, _ in got) - due
        assert late < 3000, f"the last delayed message came {late} ms after its due time"
        new = p.children("vpq.read_nodes.main")
        assert new and new[0].pid != victims[0].pid
    finally:
        p.stop()
