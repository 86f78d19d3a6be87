"""ReadNodeService: takeover with restored ack state, automatic split, start positions,
lineage order across a remap, one tailer per pp shared by every group."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from tests.read_nodes.test_service_env import FAST_OPTIONS, Env, drain
from vpq.common.errors import Conflict, NotFound
from vpq.queue_admin.cluster_placement import plan_new_queue
from vpq.read_nodes.service import ReadNodeService


@pytest.fixture
async def env(redis_url, key_prefix, tmp_path):
    e = Env(redis_url, key_prefix, tmp_path, lease_ttl_ms=1000, session_timeout_ms=8000)
    await e.start()
    yield e
    await e.stop()


async def _twelve_delivered_unacked(env: Env) -> tuple[list[dict], ReadNodeService, str, list[dict]]:
    """Queue "jobs" with 12 messages, read node r1, consumer c1 of group "g" holding all
    12 unacked: (produced, r1, consumer id, delivered)."""
    await env.create_queue("jobs", virtual_partitions=4)
    produced = await env.produce_json("jobs", [(f"key-{i}", i) for i in range(12)])
    node1 = await env.read_node("r1")
    cid = (await env.client.join(node1.address, "jobs", "g", consumer_id="c1", env="", set_="", lane=""))[
        "consumer_id"
    ]
    got = await drain(env, node1.address, "jobs", "g", cid, 12, ack=False)
    return produced, node1, cid, got


async def _redelivered_after_takeover(env: Env, address: str, cid: str, want: int) -> list[dict]:
    """What the read node at ``address`` delivers to ``cid`` once it holds the group
    (``not_owner`` until the old lease expires), within 10 s."""
    redelivered: list[dict] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while loop.time() < deadline:
        try:
            redelivered = await drain(env, address, "jobs", "g", cid, want, ack=False, timeout_s=2)
            break
        except Conflict:
            await asyncio.sleep(0.1)
    return redelivered


async def test_takeover_restores_ack_state_and_redelivers_exactly_the_unacked(env: Env) -> None:
    produced, node1, cid, got = await _twelve_delivered_unacked(env)
    a1 = node1.address
    assert len(got) == 12
    acked = [m["id"] for m in got[::2]]
    assert await env.client.ack(a1, "jobs", "g", cid, acked) == 6
    await node1.persist_now()
    await node1.stop(release=False)  # like a crash: the lease stays until its TTL

    node2 = await env.read_node("r2")
    a2 = node2.address
    with pytest.raises(Conflict) as exc:
        await env.client.poll(a2, "jobs", "g", cid, 100, 0)
    assert exc.value.code == "not_owner" and exc.value.details["owner"] == "r1"
    redelivered = await _redelivered_after_takeover(env, a2, cid, 6)
    unacked = {r["id"] for r in produced} - set(acked)
    assert {m["id"] for m in redelivered} == unacked
    assert all(m["delivery_count"] == 1 for m in redelivered)
    assert await env.client.ack(a2, "jobs", "g", cid, [m["id"] for m in redelivered]) == 6
    assert await env.client.poll(a2, "jobs", "g", cid, 100, 300) == []
    info = await env.client.group_info(a2, "jobs", "g")
    assert [m["consumer_id"] for m in info["members"]] == ["c1"] and info["lag"]["total"] == 0


async def test_automatic_split_when_consumers_outnumber_vps(env: Env) -> None:
    await env.create_queue("tiny", virtual_partitions=1)
    node = await env.read_node()
    a = node.address
    c1 = (await env.client.join(a, "tiny", "g", consumer_id="c1", env="", set_="", lane=""))["consumer_id"]
    c2 = (await env.client.join(a, "tiny", "g", consumer_id="c2", env="", set_="", lane=""))["consumer_id"]
    info = await env.client.group_info(a, "tiny", "g")
    assert sorted(tuple(m["virtual_partitions"]) for m in info["members"]) == [(0,), (1,)]
    placed = None
    for _ in range(100):  # the queue itself grows: map (CAS) first, then the lineage copy
        current = await env.md.maps.current()
        placed = current["queues"]["tiny"] if current else None
        if placed and placed["virtual_partitions"] == 2 and set(await env.md.maps.lineage_all("tiny")) == {0, 1}:
            break
        await asyncio.sleep(0.05)
    assert placed is not None and placed["virtual_partitions"] == 2
    assert set(await env.md.maps.lineage_all("tiny")) == {0, 1}
    assert (await env.md.queues.get("tiny")).virtual_partitions == 2  # type: ignore[union-attr]
    await env.cache.refresh()
    produced = await env.produce_json("tiny", [(f"k{i}", i) for i in range(40)])
    got1: list[dict] = []
    got2: list[dict] = []
    for _ in range(30):
        for cid, bucket in ((c1, got1), (c2, got2)):
            batch = await env.client.poll(a, "tiny", "g", cid, 100, 50)
            if batch:
                await env.client.ack(a, "tiny", "g", cid, [m["id"] for m in batch])
                bucket.extend(batch)
        if len(got1) + len(got2) == 40:
            break
    assert {m["id"] for m in got1 + got2} == {r["id"] for r in produced}
    assert got1 and got2
    assert {m["virtual_partition"] for m in got1}.isdisjoint({m["virtual_partition"] for m in got2})


async def test_start_latest_skips_earlier_messages(env: Env) -> None:
    await env.create_queue("news", virtual_partitions=2)
    await env.produce_json("news", [(f"old{i}", i) for i in range(5)])
    node = await env.read_node()
    a = node.address
    cid = (await env.client.join(a, "news", "late", consumer_id=None, env="", set_="", lane="", start="latest"))[
        "consumer_id"
    ]
    fresh = await env.produce_json("news", [(f"new{i}", i) for i in range(3)])
    got = await drain(env, a, "news", "late", cid, 3)
    assert {m["id"] for m in got} == {r["id"] for r in fresh}
    assert await env.client.poll(a, "news", "late", cid, 100, 200) == []
    record = await env.md.groups.get_group("news", "late")
    assert record is not None and record.start == "latest" and set(record.start_offsets) == {0, 1}


async def test_key_order_across_a_remap_and_one_tailer_per_partition(env: Env) -> None:
    # a queue that starts on pp 1 and moves to pp 0: the group scans pp 0 first, so it must
    # hold pp 0's records until it has finished the older range on pp 1
    name = next(f"moving{i}" for i in range(100) if plan_new_queue({}, f"moving{i}", 1, [0, 1], {})[0] == 1)
    await env.create_queue(name, virtual_partitions=1)
    old = await env.produce_json(name, [("k", i) for i in range(5)])
    assert {r["partition"] for r in old} == {1}
    ends = await env.end_offsets()
    end1, end0 = ends[1], ends[0]

    def move(m: dict) -> dict:
        return {"queues": {**m["queues"], name: {"virtual_partitions": 1, "placement": [0]}}}

    moved = await env.md.maps.update(move)
    assert await env.md.maps.move_range(name, 0, end1, 0, end0, moved["epoch"])
    await env.cache.refresh()
    new = await env.produce_json(name, [("k", i) for i in range(5, 10)])
    assert {r["partition"] for r in new} == {0}
    node = await env.read_node(options=replace(FAST_OPTIONS, index_keep_offsets=1000))
    a = node.address
    c1 = (await env.client.join(a, name, "g1", consumer_id="c1", env="", set_="", lane=""))["consumer_id"]
    c2 = (await env.client.join(a, name, "g2", consumer_id="c2", env="", set_="", lane=""))["consumer_id"]
    for group, cid in (("g1", c1), ("g2", c2)):
        got = await drain(env, a, name, group, cid, 10)
        assert [m["value"] for m in got] == list(range(10))
        assert [m["id"] for m in got] == [r["id"] for r in old + new]
    status = node.status()
    tailers = {t["pp"]: t for t in status["tailers"]}
    assert set(tailers) == {0, 1}
    assert all(t["readers"] == 2 for t in tailers.values())
    # each pp was tailed once for both groups
    assert tailers[1]["records_tailed"] == 5 and tailers[0]["records_tailed"] == 5
    # a group joining later needs no re-read while its start is within index_keep_offsets
    c3 = (await env.client.join(a, name, "g3", consumer_id="c3", env="", set_="", lane=""))["consumer_id"]
    assert [m["value"] for m in await drain(env, a, name, "g3", c3, 10)] == list(range(10))
    assert sum(t["records_tailed"] for t in node.status()["tailers"]) == 10


async def test_session_timeout_and_leave_release_unacked_messages(redis_url, key_prefix, tmp_path) -> None:
    e = Env(redis_url, key_prefix, tmp_path, session_timeout_ms=600)
    await e.start()
    try:
        await e.create_queue("s", virtual_partitions=2)
        produced = await e.produce_json("s", [("a", 1), ("b", 2)])
        node = await e.read_node()
        a = node.address
        sleepy = (await e.client.join(a, "s", "g", consumer_id="sleepy", env="", set_="", lane=""))["consumer_id"]
        got = await drain(e, a, "s", "g", sleepy, 2, ack=False)
        assert len(got) == 2
        # a long poll longer than the session keeps its consumer alive
        assert await e.client.poll(a, "s", "g", sleepy, 10, 1500) == []
        awake = (await e.client.join(a, "s", "g", consumer_id="awake", env="", set_="", lane=""))["consumer_id"]
        # sleepy stops polling: after its session it is removed and its messages go to awake
        # at once (the visibility timeout is 30 s)
        moved = await drain(e, a, "s", "g", awake, 2, ack=False, timeout_s=5)
        assert {m["id"] for m in moved} == {r["id"] for r in produced}
        assert all(m["delivery_count"] == 2 for m in moved)
        info = await e.client.group_info(a, "s", "g")
        assert [m["consumer_id"] for m in info["members"]] == ["awake"]
        assert [m.consumer_id for m in await e.md.groups.members("s", "g")] == ["awake"]
        # a leave hands the unacked messages over at once too
        other = (await e.client.join(a, "s", "g", consumer_id="other", env="", set_="", lane=""))["consumer_id"]
        await e.client.leave(a, "s", "g", awake)
        again = await drain(e, a, "s", "g", other, 2, timeout_s=5)
        assert {m["id"] for m in again} == {r["id"] for r in produced}
        assert all(m["delivery_count"] == 3 for m in again)
    finally:
        await e.stop()


async def test_config_change_rehosts_the_group_and_deleted_queue_drops_it(env: Env) -> None:
    await env.create_queue("cfg", virtual_partitions=2)
    produced = await env.produce_json("cfg", [("k", "v")])
    node = await env.read_node()
    a = node.address
    cid = (await env.client.join(a, "cfg", "g", consumer_id="c", env="", set_="", lane=""))["consumer_id"]
    first = await env.client.poll(a, "cfg", "g", cid, 10, 2000)
    assert [m["id"] for m in first] == [produced[0]["id"]]
    old_host = node.hosted()[("cfg", "g")]
    await env.create_queue("cfg", visibility_timeout_ms=200)  # 30 s before: the group is re-hosted
    again: list[dict] = []
    for _ in range(50):
        again = await env.client.poll(a, "cfg", "g", cid, 10, 200)
        if again:
            break
    assert node.hosted()[("cfg", "g")] is not old_host
    # in flight when re-hosted: delivered again (at-least-once), then the new timeout applies
    assert [(m["id"], m["delivery_count"]) for m in again] == [(produced[0]["id"], 1)]
    later = await env.client.poll(a, "cfg", "g", cid, 10, 2000)
    assert [(m["id"], m["delivery_count"]) for m in later] == [(produced[0]["id"], 2)]
    await env.admin.delete("cfg")
    for _ in range(50):
        if ("cfg", "g") not in node.hosted():
            break
        await asyncio.sleep(0.05)
    assert ("cfg", "g") not in node.hosted()
    with pytest.raises(NotFound) as exc:
        await env.client.poll(a, "cfg", "g", cid, 10, 0)
    assert exc.value.code == "queue_not_found"


async def test_a_save_under_way_never_lands_after_a_newer_one(env: Env) -> None:
    """A periodic save of the ack state still waiting on Redis when ``persist_now`` runs
    must not overwrite the newer state: the successor must not redeliver acked messages."""
    produced, node1, cid, got = await _twelve_delivered_unacked(env)
    a1 = node1.address
    host = await node1.host("jobs", "g")
    store = host.parts.acks
    real_save = store.save
    gate = asyncio.Event()
    calls = 0

    async def slow_first_save(*args, **kwargs):  # the first save waits in "Redis" until released
        nonlocal calls
        calls += 1
        if calls == 1:
            await gate.wait()
        return await real_save(*args, **kwargs)

    store.save = slow_first_save  # type: ignore[method-assign]
    early = asyncio.create_task(host._persist())  # the state before the acks  # noqa: SLF001
    while calls == 0:
        await asyncio.sleep(0.01)
    acked = [m["id"] for m in got[::2]]
    assert await env.client.ack(a1, "jobs", "g", cid, acked) == 6
    late = asyncio.create_task(node1.persist_now())
    await asyncio.sleep(0.2)
    gate.set()
    await asyncio.gather(early, late)
    store.save = real_save  # type: ignore[method-assign]
    await node1.stop(release=False)

    node2 = await env.read_node("r2")
    redelivered = await _redelivered_after_takeover(env, node2.address, cid, 6)
    assert {m["id"] for m in redelivered} == {r["id"] for r in produced} - set(acked)
