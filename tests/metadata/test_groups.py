from __future__ import annotations

import asyncio

import pytest

from vpq.metadata.acks import StoredAckState, encode_state
from vpq.metadata.leases import group_resource
from vpq.metadata.store import MetadataStore


async def _keys(md: MetadataStore) -> set[str]:
    return {k async for k in md.client.scan_iter(match=f"{md.keys.prefix}:*")}


async def test_join_creates_group_and_generation_bumps_on_changes(md: MetadataStore) -> None:
    assert await md.groups.get_group("q", "g") is None
    g1 = await md.groups.join("q", "g", "c1", ("prod", "", ""), 10000, start="latest")
    assert g1 == 1
    rec = await md.groups.get_group("q", "g")
    assert rec is not None and rec.start == "latest" and rec.generation == 1
    assert await md.groups.join("q", "g", "c1", ("prod", "", ""), 10000) == 1  # same data: no change
    assert await md.groups.join("q", "g", "c1", ("prod", "", "feat-a"), 10000) == 2  # lane changed
    assert await md.groups.join("q", "g", "c2", ("", "", ""), 10000, start="earliest") == 3
    rec = await md.groups.get_group("q", "g")
    assert rec is not None and rec.start == "latest"  # start is only used at creation
    members = await md.groups.members("q", "g")
    assert [(m.consumer_id, m.context) for m in members] == [("c1", ("prod", "", "feat-a")), ("c2", ("prod", "", ""))]
    assert await md.groups.leave("q", "g", "c1") == 4
    assert await md.groups.leave("q", "g", "c1") is None
    assert await md.groups.heartbeat("q", "g", "c1") is None
    assert await md.groups.groups("q") == ["g"]


async def test_join_many_writes_each_join_in_order_in_one_call(md: MetadataStore) -> None:
    joins = [("c1", ("prod", "", ""), "latest"), ("c2", ("", "", ""), "earliest"), ("c1", ("prod", "", "feat-a"), "earliest")]
    assert await md.groups.join_many("q", "g", joins, 10000) == [1, 2, 3]
    rec = await md.groups.get_group("q", "g")
    assert rec is not None and rec.start == "latest" and rec.generation == 3  # the first join created it
    members = await md.groups.members("q", "g")
    assert [(m.consumer_id, m.context) for m in members] == [("c1", ("prod", "", "feat-a")), ("c2", ("prod", "", ""))]
    assert await md.groups.join_many("q", "g", [("c2", ("", "", ""), "earliest")], 10000) == [3]  # no change
    assert await md.groups.join_many("q", "g", [], 10000) == []
    with pytest.raises(ValueError):
        await md.groups.join_many("q", "g", [("c3", ("", "", ""), "middle")], 10000)  # type: ignore[list-item]
    assert [m.consumer_id for m in await md.groups.members("q", "g")] == ["c1", "c2"]


async def test_silent_consumer_expires_while_heartbeating_one_stays(md: MetadataStore) -> None:
    now = 1_000_000
    await md.groups.join("q", "g", "quiet", ("prod", "", ""), 300, now_ms=now)
    gen = await md.groups.join("q", "g", "busy", ("prod", "", ""), 300, now_ms=now)
    for t in range(now + 100, now + 1000, 100):
        assert await md.groups.heartbeat("q", "g", "busy", now_ms=t) == gen
        removed = await md.groups.expire("q", "g", now_ms=t)
        if t <= now + 300:
            assert removed == []
        elif removed:
            assert removed == ["quiet"]
            gen += 1
    assert [m.consumer_id for m in await md.groups.members("q", "g")] == ["busy"]
    rec = await md.groups.get_group("q", "g")
    assert rec is not None and rec.generation == gen == 3
    # a heartbeat after the deadline finds the member expired
    assert await md.groups.heartbeat("q", "g", "busy", now_ms=now + 5000) is None
    assert await md.groups.members("q", "g") == []


async def test_expire_on_the_redis_clock(md: MetadataStore) -> None:
    await md.groups.join("q", "g", "quiet", ("prod", "", ""), 150)
    await md.groups.join("q", "g", "busy", ("prod", "", ""), 150)
    removed: list[str] = []
    async with asyncio.timeout(5):
        while not removed:
            await asyncio.sleep(0.05)
            assert await md.groups.heartbeat("q", "g", "busy") is not None
            removed = await md.groups.expire("q", "g")
    assert removed == ["quiet"]
    assert [m.consumer_id for m in await md.groups.members("q", "g")] == ["busy"]


async def test_start_offsets_first_writer_wins_and_delete(md: MetadataStore) -> None:
    await md.groups.join("q", "g", "c1", ("prod", "", ""), 1000)
    assert await md.groups.set_start_offsets("q", "g", {0: 10, 1: 20}) == {0: 10, 1: 20}
    assert await md.groups.set_start_offsets("q", "g", {0: 99, 2: 5}) == {0: 10, 1: 20, 2: 5}
    rec = await md.groups.get_group("q", "g")
    assert rec is not None and rec.start_offsets == {0: 10, 1: 20, 2: 5}
    assert await md.groups.delete_group("q", "g")
    assert not await md.groups.delete_group("q", "g")
    assert await md.groups.get_group("q", "g") is None
    assert await md.groups.members("q", "g") == []
    assert await md.groups.groups("q") == []


async def test_delete_group_removes_every_key_of_the_group(md: MetadataStore) -> None:
    """Record, members, deadlines, start offsets, ack state, lease and fence counter go;
    another group of the queue keeps all of its keys; a re-created group's tokens stay
    above every token of its former self (the fence floor)."""
    before = await _keys(md)
    for g in ("g", "other"):
        await md.groups.join("q", g, "c1", ("prod", "", ""), 60_000)
        await md.groups.set_start_offsets("q", g, {0: 10})
        token = await md.leases.acquire(group_resource("q", g), "r1", 60_000)
        assert token is not None
        assert await md.acks.save("q", g, token, {0: encode_state(1, token, StoredAckState(12, (11,)))})
    with_groups = await _keys(md)
    other = {k for k in with_groups - before if ":other" in k}
    assert len(other) >= 7  # record, deadlines, members, start, ackstate, lease, fence
    old_token = await md.leases.acquire(group_resource("q", "g"), "r1", 60_000)
    assert await md.groups.delete_group("q", "g")
    after = await _keys(md)
    assert {k for k in after if ":g:" in k or k.endswith(":g")} == set()
    assert other <= after and md.keys.fence_floor() in after
    assert await md.groups.groups("q") == ["other"]
    assert not await md.groups.delete_group("q", "g")
    # the lease is gone: its holder is fenced off, and a new incarnation's tokens go on
    assert not await md.leases.renew(group_resource("q", "g"), "r1", old_token, 60_000)
    assert not await md.acks.save("q", "g", old_token, {0: encode_state(1, old_token, StoredAckState(13))})
    new_token = await md.leases.acquire(group_resource("q", "g"), "r2", 60_000)
    assert new_token is not None and old_token is not None and new_token > old_token


async def test_delete_group_removes_the_leftovers_of_a_group_without_record(md: MetadataStore) -> None:
    token = await md.leases.acquire(group_resource("q", "gone"), "r1", 60_000)
    assert token is not None
    assert await md.acks.save("q", "gone", token, {0: encode_state(1, token, StoredAckState(3))})
    assert not await md.groups.delete_group("q", "gone")  # no record: not announced, still cleaned
    assert not await md.client.exists(
        md.keys.acks("q", "gone"), md.keys.lease(group_resource("q", "gone")), md.keys.fence(group_resource("q", "gone"))
    )


async def test_bad_input(md: MetadataStore) -> None:
    with pytest.raises(ValueError):
        await md.groups.join("q", "g", "c 1", ("prod", "", ""), 1000)
    with pytest.raises(ValueError):
        await md.groups.join("q", "g", "c1", ("prod", "", "Lane"), 1000)
    with pytest.raises(ValueError):
        await md.groups.join("q", "g", "c1", ("prod", "", ""), 1000, start="middle")  # type: ignore[arg-type]


async def test_expired_count_is_kept_with_the_group_and_goes_with_it(md: MetadataStore) -> None:
    assert await md.groups.add_expired("q", "g", 3) is None  # no group: nothing created
    assert await md.groups.get_group("q", "g") is None
    await md.groups.join("q", "g", "c1", ("prod", "", ""), 10_000)
    assert (await md.groups.get_group("q", "g")).expired == 0  # type: ignore[union-attr]
    assert await md.groups.add_expired("q", "g", 3) == 3
    assert await md.groups.add_expired("q", "g", 4) == 7
    assert (await md.groups.get_group("q", "g")).expired == 7  # type: ignore[union-attr]
    await md.groups.delete_group("q", "g")
    await md.groups.join("q", "g", "c1", ("prod", "", ""), 10_000)
    assert (await md.groups.get_group("q", "g")).expired == 0  # type: ignore[union-attr]
