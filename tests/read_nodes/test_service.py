"""ReadNodeService end to end: real Redis, the real WriteNodeService, the real produce
and queue-admin paths, the read node on a free port driven through ``node_rpc.read_node_client``."""

from __future__ import annotations

import asyncio
import base64

import orjson
import pytest

from tests.read_nodes.test_service_env import Env, drain
from vpq.common.errors import BadRequest, NotFound
from vpq.isolation.context import IsolationContext
from vpq.produce_path.produce import PlainMessage


@pytest.fixture
async def env(redis_url, key_prefix, tmp_path):
    e = Env(redis_url, key_prefix, tmp_path)
    await e.start()
    yield e
    await e.stop()


async def test_join_poll_ack_round_trip(env: Env) -> None:
    await env.create_queue("orders", virtual_partitions=4)
    produced = await env.produce_json("orders", [(f"k{i % 3}", {"seq": i}) for i in range(9)])
    raw = await env.produce(
        "orders", [PlainMessage(value=b"\x00\xffraw", key=None, headers={"h": "v"}, context=("prod", "", ""))]
    )
    node = await env.read_node()
    a = node.address
    joined = await env.client.join(a, "orders", "g", consumer_id=None, env="prod", set_="", lane="")
    cid = joined["consumer_id"]
    assert joined["session_timeout_ms"] == env.settings.queues.session_timeout_ms
    # one consumer: each key's messages come in runs, in order (a poll may catch a key's
    # messages before all of them were read in: the rest then waits for the run's ack)
    got = await drain(env, a, "orders", "g", cid, 10)
    assert sorted(m["key"] or "" for m in got) == ["", "k0", "k0", "k0", "k1", "k1", "k1", "k2", "k2", "k2"]
    for k in ("k0", "k1", "k2"):
        seqs = [m["value"]["seq"] for m in got if m["key"] == k]
        assert seqs == sorted(seqs)
    more = await env.produce_json("orders", [("k5", {"seq": 100 + i}) for i in range(3)])
    held: list[dict] = []
    for _ in range(20):
        held += await env.client.poll(a, "orders", "g", cid, 100, 200)
        info = await env.client.group_info(a, "orders", "g")
        if info["lag"]["total"] == 3 and held:
            break
    assert info["queue"] == "orders" and info["group"] == "g"
    assert info["members"] == [
        {"consumer_id": cid, "lane": "", "env": "prod", "set": "", "virtual_partitions": [0, 1, 2, 3],
         "in_flight": len(held)}
    ]
    assert info["lag"]["total"] == 3 and info["lag"]["by_env"] == {"prod": 3}
    assert sum(info["lag"]["by_virtual_partition"].values()) == 3
    assert info["lag"]["oldest_unacked_age_ms"] >= 0
    assert await env.client.ack(a, "orders", "g", cid, [m["id"] for m in held] + ["0-999999"]) == len(held)
    got += held + await drain(env, a, "orders", "g", cid, 3 - len(held))
    produced = produced + more
    assert (await env.client.group_info(a, "orders", "g"))["lag"]["oldest_unacked_age_ms"] is None
    by_id = {m["id"]: m for m in got}
    assert set(by_id) == {r["id"] for r in produced + raw}
    first = by_id[produced[0]["id"]]
    assert first == {
        "id": produced[0]["id"], "queue": "orders", "key": "k0", "value": {"seq": 0}, "headers": {},
        "lane": "", "env": "prod", "set": "", "partition": produced[0]["partition"],
        "offset": produced[0]["offset"], "virtual_partition": produced[0]["virtual_partition"],
        "timestamp_ms": first["timestamp_ms"], "delivery_count": 1,
    }
    assert first["timestamp_ms"] > 0
    b = by_id[raw[0]["id"]]
    assert base64.b64decode(b["value_b64"]) == b"\x00\xffraw" and "value" not in b
    assert b["key"] is None and b["headers"] == {"h": "v"}
    # per key: ingestion order
    seqs: dict[str, list[int]] = {}
    for m in got:
        if m["key"] is not None:
            seqs.setdefault(m["key"], []).append(m["value"]["seq"])
    assert all(s == sorted(s) for s in seqs.values())
    assert len(got) == 13
    assert await env.client.poll(a, "orders", "g", cid, 10, 100) == []
    info = await env.client.group_info(a, "orders", "g")
    assert info["lag"] == {"total": 0, "by_lane": {}, "by_env": {}, "by_set": {}, "by_virtual_partition": {},
                           "oldest_unacked_age_ms": None}
    # new messages wake a long poll
    later = await env.produce_json("orders", [("k9", "late")])
    got = await drain(env, a, "orders", "g", cid, 1)
    assert [m["id"] for m in got] == [later[0]["id"]]
    # the index keeps nothing below the group's cursors (truncated as the tail moves on)
    assert sum(t["index_entries"] for t in node.status()["tailers"]) <= 1
    # so a second group starting from the beginning makes the tailers re-read: it sees everything
    other = (await env.client.join(a, "orders", "g2", consumer_id=None, env="", set_="", lane=""))["consumer_id"]
    again = await drain(env, a, "orders", "g2", other, 11)
    assert sorted(m["id"] for m in again) == sorted(r["id"] for r in produced + raw + later)
    assert sum(t["records_tailed"] for t in node.status()["tailers"]) > 11


async def test_errors(env: Env) -> None:
    await env.create_queue("q1")
    node = await env.read_node()
    a = node.address
    with pytest.raises(NotFound) as exc:
        await env.client.join(a, "nope", "g", consumer_id=None, env="", set_="", lane="")
    assert exc.value.code == "queue_not_found"
    with pytest.raises(NotFound) as exc:
        await env.client.poll(a, "q1", "never", "c1", 1, 0)
    assert exc.value.code == "group_not_found"
    cid = (await env.client.join(a, "q1", "g", consumer_id="me", env="", set_="", lane=""))["consumer_id"]
    assert cid == "me"
    with pytest.raises(NotFound) as exc:
        await env.client.poll(a, "q1", "g", "someone-else", 1, 0)
    assert exc.value.code == "consumer_not_found"
    with pytest.raises(BadRequest):
        await env.client.ack(a, "q1", "g", cid, ["not-an-id"])
    with pytest.raises(BadRequest):
        await env.client.join(a, "q1", "g", consumer_id=None, env="Bad Env", set_="", lane="")
    await env.client.leave(a, "q1", "g", cid)
    with pytest.raises(NotFound):
        await env.client.leave(a, "q1", "g", cid)


async def test_lane_routing_and_fallback(env: Env) -> None:
    await env.create_queue("lanes", virtual_partitions=2)
    lane = IsolationContext(lane="feat-a")
    node = await env.read_node()
    a = node.address
    backbone = (await env.client.join(a, "lanes", "g", consumer_id="bb", env="", set_="", lane=""))["consumer_id"]
    feat = (await env.client.join(a, "lanes", "g", consumer_id="fa", env="", set_="", lane="feat-a"))["consumer_id"]
    main = await env.produce_json("lanes", [(f"m{i}", i) for i in range(4)])
    tagged = await env.produce_json("lanes", [(f"t{i}", i) for i in range(3)], ctx=lane)
    test_env = await env.produce_json("lanes", [("x", 1)], ctx=IsolationContext(env="test"))
    got_feat = await drain(env, a, "lanes", "g", feat, 3)
    got_bb = await drain(env, a, "lanes", "g", backbone, 4)
    assert {m["id"] for m in got_feat} == {r["id"] for r in tagged}
    assert all(m["lane"] == "feat-a" for m in got_feat)
    assert {m["id"] for m in got_bb} == {r["id"] for r in main}
    # the lane consumer leaves: lane messages fall back to the backbone; env test never reaches prod
    await env.client.leave(a, "lanes", "g", feat)
    more = await env.produce_json("lanes", [("t9", "again")], ctx=lane)
    got = await drain(env, a, "lanes", "g", backbone, 1)
    assert [m["id"] for m in got] == [more[0]["id"]] and got[0]["lane"] == "feat-a"
    assert await env.client.poll(a, "lanes", "g", backbone, 10, 200) == []
    info = await env.client.group_info(a, "lanes", "g")
    assert info["lag"]["total"] == 1 and info["lag"]["by_env"] == {"test": 1}
    assert test_env[0]["id"]


async def test_redelivery_after_visibility_timeout_and_nack(env: Env) -> None:
    await env.create_queue("vis", visibility_timeout_ms=300)
    produced = await env.produce_json("vis", [("k", "a"), ("k", "b")])
    node = await env.read_node()
    a = node.address
    cid = (await env.client.join(a, "vis", "g", consumer_id="c", env="", set_="", lane=""))["consumer_id"]
    first = await env.client.poll(a, "vis", "g", cid, 1, 2000)
    assert [(m["id"], m["delivery_count"]) for m in first] == [(produced[0]["id"], 1)]
    again = await env.client.poll(a, "vis", "g", cid, 1, 3000)  # woken by the visibility deadline
    assert [(m["id"], m["delivery_count"]) for m in again] == [(produced[0]["id"], 2)]
    assert await env.client.nack(a, "vis", "g", cid, [produced[0]["id"]], 100) == 1
    third = await env.client.poll(a, "vis", "g", cid, 1, 3000)
    assert [(m["id"], m["delivery_count"]) for m in third] == [(produced[0]["id"], 3)]
    assert await env.client.ack(a, "vis", "g", cid, [produced[0]["id"]]) == 1
    nxt = await env.client.poll(a, "vis", "g", cid, 10, 2000)
    assert [m["id"] for m in nxt] == [produced[1]["id"]]


async def test_dead_letter_queue(env: Env) -> None:
    await env.create_queue("work", max_deliveries=2)
    produced = await env.produce_json("work", [("k", {"n": 1})])
    node = await env.read_node()
    a = node.address
    cid = (await env.client.join(a, "work", "g", consumer_id="c", env="", set_="", lane=""))["consumer_id"]
    for count in (1, 2):
        got = await env.client.poll(a, "work", "g", cid, 10, 2000)
        assert [(m["id"], m["delivery_count"]) for m in got] == [(produced[0]["id"], count)]
        assert await env.client.nack(a, "work", "g", cid, [produced[0]["id"]], 0) == 1
    # dead-lettered: gone from the group, present in work.g.dlq with its original id
    dlq = "work.g.dlq"
    for _ in range(100):
        if await env.md.queues.get(dlq) is not None:
            break
        await asyncio.sleep(0.05)
    assert (await env.client.group_info(a, "work", "g"))["lag"]["total"] == 0
    reader = (await env.client.join(a, dlq, "audit", consumer_id="au", env="", set_="", lane=""))["consumer_id"]
    got = await drain(env, a, dlq, "audit", reader, 1)
    assert len(got) == 1
    assert got[0]["value"] == {"n": 1} and got[0]["key"] == "k"
    assert got[0]["headers"] == {"x-original-id": produced[0]["id"]}
    assert await env.client.poll(a, "work", "g", cid, 10, 200) == []
    assert orjson.loads(orjson.dumps(got[0]))  # JSON-serialisable


async def test_a_context_without_consumers_stays_out_of_the_cache_and_is_read_in_blocks_later(env: Env) -> None:
    await env.create_queue("cold", virtual_partitions=1)
    node = await env.read_node()
    a = node.address
    prod = (await env.client.join(a, "cold", "g", consumer_id="p", env="", set_="", lane=""))["consumer_id"]
    test_env = IsolationContext(env="test")
    sent = []
    for i in range(10):
        sent += await env.produce_json("cold", [(f"k{j}", i * 100 + j) for j in range(100)], ctx=test_env)
    await env.produce_json("cold", [("p", "x")])
    assert [m["value"] for m in await drain(env, a, "cold", "g", prod, 1)] == ["x"]
    status = node.status()
    # indexed, not cached (but what was tailed before the group first met the context)
    assert status["cache"]["entries"] <= 101
    tester = (await env.client.join(a, "cold", "g", consumer_id="t", env="test", set_="", lane=""))["consumer_id"]
    got = await drain(env, a, "cold", "g", tester, 1000)
    assert sorted(m["id"] for m in got) == sorted(r["id"] for r in sent)
    # read back from the write node a block at a time, not once per record
    assert node.status()["cache"]["fetches"] - status["cache"]["fetches"] <= 10
