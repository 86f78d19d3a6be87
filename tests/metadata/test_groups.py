from __future__ import annotations

import asyncio

import pytest

from vpq.metadata.store import MetadataStore


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


async def test_bad_input(md: MetadataStore) -> None:
    with pytest.raises(ValueError):
        await md.groups.join("q", "g", "c 1", ("prod", "", ""), 1000)
    with pytest.raises(ValueError):
        await md.groups.join("q", "g", "c1", ("prod", "", "Lane"), 1000)
    with pytest.raises(ValueError):
        await md.groups.join("q", "g", "c1", ("prod", "", ""), 1000, start="middle")  # type: ignore[arg-type]
