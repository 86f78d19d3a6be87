"""Every consumer behaviour of API.md against a real `vpq up` (processes, Redis, disks)."""

from __future__ import annotations

import base64
import time

import pytest

from tests.integration.api import Api, OrderChecker, unique_name

pytestmark = pytest.mark.integration




def drain(api: Api, queue: str, group: str, cid: str, want: int, timeout_s: float = 20.0, ack: bool = True):
    got: list[dict] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        batch = api.poll(queue, group, cid, max_messages=100, wait_ms=500)
        got.extend(batch)
        if ack and batch:
            api.ack(queue, group, cid, [m["id"] for m in batch])
    return got


def test_round_trip_json_and_bytes(api):
    q = unique_name("rt")
    assert api.put_queue(q, virtual_partitions=8)["virtual_partitions"] == 8
    results = api.produce(q, [
        {"key": "order-42", "value": {"any": "json"}, "headers": {"h": "v"}},
        {"key": "order-43", "value_b64": base64.b64encode(b"\x00\x01raw").decode()},
        {"value": [1, 2, 3]},
    ])
    assert len(results) == 3
    for r in results:
        assert set(r) >= {"id", "partition", "offset", "virtual_partition"}
        assert 0 <= r["virtual_partition"] < 8
    cid = api.join(q, "g1")
    msgs = drain(api, q, "g1", cid, 3, ack=False)
    by_id = {m["id"]: m for m in msgs}
    assert set(by_id) == {r["id"] for r in results}
    first = by_id[results[0]["id"]]
    assert first["value"] == {"any": "json"} and first["headers"] == {"h": "v"} and first["key"] == "order-42"
    assert first["queue"] == q and first["env"] == "prod" and first["lane"] == "" and first["set"] == ""
    assert first["delivery_count"] == 1 and first["partition"] == results[0]["partition"]
    assert first["offset"] == results[0]["offset"] and first["virtual_partition"] == results[0]["virtual_partition"]
    raw = by_id[results[1]["id"]]
    assert base64.b64decode(raw["value_b64"]) == b"\x00\x01raw" and raw.get("value") is None
    assert by_id[results[2]["id"]]["key"] is None
    assert api.ack(q, "g1", cid, list(by_id)) == 3
    assert api.poll(q, "g1", cid, wait_ms=300) == []
    # a second group sees every message again
    other = api.join(q, "g2")
    assert {m["id"] for m in drain(api, q, "g2", other, 3)} == set(by_id)


def test_per_key_order_across_joins_and_leaves(api):
    q = unique_name("order")
    api.put_queue(q, virtual_partitions=4)
    checker = OrderChecker()
    keys = [f"k{i}" for i in range(8)]
    msgs = [{"key": keys[i % 8], "value": {"seq": i}} for i in range(240)]
    for r, m in zip(api.produce(q, msgs), msgs):
        checker.produced_in_order(m["key"], r["id"])
    consumers = [api.join(q, "g")]
    held: dict[str, list[str]] = {}  # consumer -> delivered, deliberately not yet acked
    seen: set[str] = set()
    step = 0
    deadline = time.monotonic() + 60
    while len(seen) < len(msgs) and time.monotonic() < deadline:
        step += 1
        if step == 3:
            consumers.append(api.join(q, "g"))
        if step == 6:
            consumers.append(api.join(q, "g"))
        if step == 9:  # leaves holding unacked messages: they go to the others at once
            leaver = consumers.pop(0)
            last = api.poll(q, "g", leaver, max_messages=5)
            for m in last:
                checker.delivered(m["key"], m["id"], last)
            api.leave(q, "g", leaver)
            held.pop(leaver, None)
        for cid in list(consumers):
            batch = api.poll(q, "g", cid, max_messages=7, wait_ms=100)
            for m in batch:
                checker.delivered(m["key"], m["id"], batch)
            # ack what was held back last step, and all of this batch but its last message
            # on odd steps: keeps some keys blocked across polls, joins and the leave
            to_ack = held.pop(cid, []) + [m["id"] for m in batch]
            if step % 2 and batch:
                held[cid] = [to_ack.pop()]
            if to_ack:
                api.ack(q, "g", cid, to_ack)
                checker.ack(to_ack)
                seen.update(to_ack)
    assert checker.violations == []
    assert len(seen) == len(msgs)


def test_twelve_consumers_on_two_partitions_all_work(api, platform):
    q = unique_name("wide")
    api.put_queue(q, virtual_partitions=16)
    assert len(api.cluster()["physical_partitions"]) == 2
    api.produce(q, [{"key": f"key-{i}", "value": i} for i in range(600)])
    consumers = [api.join(q, "g") for _ in range(12)]
    counts = {c: 0 for c in consumers}
    deadline = time.monotonic() + 30
    total = 0
    while total < 600 and time.monotonic() < deadline:
        for cid in consumers:
            batch = api.poll(q, "g", cid, max_messages=10, wait_ms=50)
            if batch:
                api.ack(q, "g", cid, [m["id"] for m in batch])
                counts[cid] += len(batch)
                total += len(batch)
    assert total == 600
    assert all(n > 0 for n in counts.values()), counts
    members = api.group(q, "g")["members"]
    assert len(members) == 12 and all(m["virtual_partitions"] for m in members)
    assert len(api.cluster()["physical_partitions"]) == 2  # consumers never add partitions


def test_lane_fallback_and_isolation(api):
    q = unique_name("lane")
    api.put_queue(q)
    backbone = api.join(q, "g")
    api.produce(q, [{"key": "a", "value": "lane-before"}], headers={"X-Lane": "feat-a"})
    got = drain(api, q, "g", backbone, 1)
    assert [m["value"] for m in got] == ["lane-before"] and got[0]["lane"] == "feat-a"
    lane_consumer = api.join(q, "g", lane="feat-a")
    api.produce(q, [{"key": "b", "value": "lane-after", "lane": "feat-a"}, {"key": "c", "value": "main"}])
    lane_got = drain(api, q, "g", lane_consumer, 1)
    main_got = drain(api, q, "g", backbone, 1)
    assert [m["value"] for m in lane_got] == ["lane-after"]
    assert [m["value"] for m in main_got] == ["main"]
    assert api.poll(q, "g", backbone, wait_ms=300) == [] and api.poll(q, "g", lane_consumer, wait_ms=300) == []


def test_env_is_strict(api):
    q = unique_name("env")
    api.put_queue(q)
    prod = api.join(q, "g")
    api.produce(q, [{"key": "x", "value": "test-only"}], headers={"X-Env": "test"})
    assert drain(api, q, "g", prod, 1, timeout_s=2) == []
    tester = api.join(q, "g", env="test")
    got = drain(api, q, "g", tester, 1)
    assert [m["value"] for m in got] == ["test-only"] and got[0]["env"] == "test"


def test_set_fallback(api):
    q = unique_name("set")
    api.put_queue(q)
    default_set = api.join(q, "g")
    api.produce(q, [{"key": "x", "value": "east-1", "set": "east"}])
    assert [m["value"] for m in drain(api, q, "g", default_set, 1)] == ["east-1"]
    east = api.join(q, "g", set="east")
    api.produce(q, [{"key": "y", "value": "east-2", "set": "east"}])
    assert [m["value"] for m in drain(api, q, "g", east, 1)] == ["east-2"]
    assert api.poll(q, "g", default_set, wait_ms=300) == []


def test_redelivery_after_visibility_timeout(api):
    q = unique_name("vis")
    api.put_queue(q, visibility_timeout_ms=800)
    api.produce(q, [{"key": "k", "value": 1}])
    cid = api.join(q, "g")
    first = drain(api, q, "g", cid, 1, ack=False)
    assert first[0]["delivery_count"] == 1
    assert api.poll(q, "g", cid, wait_ms=200) == []
    time.sleep(1.0)
    again = drain(api, q, "g", cid, 1, ack=False)
    assert again[0]["id"] == first[0]["id"] and again[0]["delivery_count"] == 2


def test_nack_with_delay(api):
    q = unique_name("nack")
    api.put_queue(q)
    api.produce(q, [{"key": "k", "value": 1}])
    cid = api.join(q, "g")
    msg = drain(api, q, "g", cid, 1, ack=False)[0]
    assert api.nack(q, "g", cid, [msg["id"]], delay_ms=1000) == 1
    assert api.poll(q, "g", cid, wait_ms=300) == []
    time.sleep(0.9)
    again = drain(api, q, "g", cid, 1, ack=False)
    assert again[0]["id"] == msg["id"] and again[0]["delivery_count"] == 2


def test_dead_letter_after_max_deliveries(api):
    q = unique_name("dlq")
    api.put_queue(q, max_deliveries=2)
    produced = api.produce(q, [{"key": "k", "value": "poison", "headers": {"a": "b"}}])[0]
    cid = api.join(q, "g")
    for n in (1, 2):
        msg = drain(api, q, "g", cid, 1, ack=False)[0]
        assert msg["delivery_count"] == n
        api.nack(q, "g", cid, [msg["id"]])
    assert api.poll(q, "g", cid, wait_ms=500) == []
    dlq = f"{q}.g.dlq"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if api.call("GET", f"/v1/queues/{dlq}", expect=None).status_code == 200:
            break
        time.sleep(0.1)
    reader = api.join(dlq, "inspect")
    dead = drain(api, dlq, "inspect", reader, 1)
    assert len(dead) == 1
    assert dead[0]["value"] == "poison" and dead[0]["headers"]["x-original-id"] == produced["id"]
    assert dead[0]["headers"]["a"] == "b"


def test_lag_by_lane_env_set(api):
    q = unique_name("lag")
    api.put_queue(q)
    cid = api.join(q, "g")
    api.produce(q, [{"key": f"b{i}", "value": i} for i in range(5)])
    api.produce(q, [{"key": f"l{i}", "value": i} for i in range(3)], headers={"X-Lane": "feat-a"})
    api.produce(q, [{"key": "t", "value": 0, "env": "test"}])
    deadline = time.monotonic() + 10
    lag = {}
    while time.monotonic() < deadline:
        lag = api.group(q, "g")["lag"]
        if lag.get("total") == 9:
            break
        time.sleep(0.2)
    assert lag["total"] == 9
    assert lag["by_lane"] == {"": 6, "feat-a": 3}
    assert lag["by_env"] == {"prod": 8, "test": 1}
    assert lag["by_set"] == {"": 9}
    got = drain(api, q, "g", cid, 8)
    assert len(got) == 8
    assert api.group(q, "g")["lag"]["total"] == 1  # the env=test message waits for a test consumer
