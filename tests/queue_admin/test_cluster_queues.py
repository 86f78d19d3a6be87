"""Queue placement: pure planning (queue_admin/cluster_placement.py) and the admin's
compare-and-swap + lineage logic (queue_admin/cluster_queues.py) against a real redis-server."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.common.errors import BadRequest, Conflict, NotFound
from vpq.metadata.acks import StoredAckState, encode_state
from vpq.metadata.leases import group_resource
from vpq.metadata.maps import LineageRange
from vpq.metadata.store import MetadataStore
from vpq.queue_admin.cluster_placement import lineage_repair_splits, load_hint, plan_new_queue
from vpq.queue_admin.cluster_queues import QueueAdmin
from vpq.traffic.cluster_traffic import TrafficMeter

# ---------------------------------------------------------------- pure planning


def test_plan_new_queue_balances_and_keeps_existing_lineage() -> None:
    queues = {"a": {"virtual_partitions": 4, "placement": [0, 0, 0, 1]}}
    assert load_hint(queues, [0, 1, 2]) == {0: 3, 1: 1, 2: 0}
    plan = plan_new_queue(queues, "b", 4, [0, 1, 2], keep={})
    counts = Counter(plan)
    assert counts[2] >= counts[1] >= counts[0]  # the least loaded pps fill first
    assert plan_new_queue(queues, "b", 4, [0, 1, 2], keep={1: 0})[1] == 0


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 6), st.integers(0, 6), st.data())
def test_lineage_repair_splits_fill_every_gap_from_a_complete_prefix(log_v0: int, extra: int, data: st.DataObject) -> None:
    v0 = 1 << log_v0
    v = v0 << extra
    # a queue created with v0 vps, grown to v, whose split copies were lost from some level on
    complete_up_to = v0 << data.draw(st.integers(0, extra))
    present = set(range(complete_up_to))
    splits = lineage_repair_splits(present, v)
    assert splits == [w for w in (v0 << i for i in range(extra)) if w >= complete_up_to]
    have = set(present)
    for w in splits:
        assert set(range(w)) <= have
        have |= {vp + w for vp in range(w)}
    assert have == set(range(v))


# ---------------------------------------------------------------- against Redis


def admin_for(md: MetadataStore, k: int = 4, on_change: Callable[[], Any] | None = None) -> QueueAdmin:
    return QueueAdmin(md, lambda: list(range(k)), TrafficMeter(), on_change=on_change)


async def check_lineage_matches_map(md: MetadataStore, name: str) -> dict[str, Any]:
    m = await md.maps.current()
    assert m is not None
    q = m["queues"][name]
    lineage = await md.maps.lineage_all(name)
    assert sorted(lineage) == list(range(q["virtual_partitions"]))
    for vp, ranges in lineage.items():
        assert ranges[-1].to_offset is None and ranges[-1].pp == q["placement"][vp]
    return m


async def test_create_places_the_queue_and_opens_lineage(md: MetadataStore) -> None:
    changes: list[int] = []

    async def changed() -> None:
        changes.append(1)

    admin = admin_for(md, on_change=changed)
    info, created = await admin.put("orders", {"virtual_partitions": 8})
    assert created and changes == [1]
    assert info["name"] == "orders" and info["virtual_partitions"] == 8 and info["ordering"] == "key"
    assert info["epoch"] == 1 and len(info["placement"]) == 8
    assert Counter(info["placement"]) == {0: 2, 1: 2, 2: 2, 3: 2}
    assert info["traffic"]["messages_total"] == 0
    m = await check_lineage_matches_map(md, "orders")
    assert m["queues"]["orders"]["placement"] == info["placement"]
    assert all(r == [LineageRange(info["placement"][vp], 0, None)] for vp, r in (await md.maps.lineage_all("orders")).items())
    # the same put again: nothing new is published
    info2, created2 = await admin.put("orders", {"virtual_partitions": 8})
    assert not created2 and info2["epoch"] == 1 and info2["placement"] == info["placement"]


async def test_small_queues_fill_the_least_loaded_partitions(md: MetadataStore) -> None:
    admin = admin_for(md, k=4)
    await admin.put("big", {"virtual_partitions": 2})
    for i in range(6):
        await admin.put(f"s{i}", {"virtual_partitions": 1})
    m = await md.maps.current()
    assert m is not None and m["epoch"] == 7
    loads = Counter(pp for q in m["queues"].values() for pp in q["placement"])
    assert sorted(loads.values()) == [2, 2, 2, 2]


async def test_growing_splits_placement_and_lineage(md: MetadataStore) -> None:
    admin = admin_for(md)
    info, _ = await admin.put("q", {"virtual_partitions": 4})
    before = info["placement"]
    # give vp 1 a history (a remap), so the copy of lineage is visible
    assert await md.maps.move_range("q", 1, 10, 3 if before[1] != 3 else 2, 0, 1)

    def move(m: dict[str, Any]) -> dict[str, Any]:
        m["queues"]["q"]["placement"][1] = 3 if before[1] != 3 else 2
        return m

    await md.maps.update(move)
    info, created = await admin.put("q", {"virtual_partitions": 16})
    assert not created and info["virtual_partitions"] == 16 and info["epoch"] == 3
    m = await check_lineage_matches_map(md, "q")
    placement = m["queues"]["q"]["placement"]
    assert placement == placement[:4] * 4
    lineage = await md.maps.lineage_all("q")
    for vp in range(16):
        assert lineage[vp] == lineage[vp % 4]
    assert len(lineage[5]) == 2  # vp 5 inherited vp 1's two ranges
    with pytest.raises(Conflict) as info_err:
        await admin.put("q", {"virtual_partitions": 8})
    assert info_err.value.code == "virtual_partitions_shrink"
    assert (await md.maps.current()) == m  # the refused put changed nothing


async def test_grow_never_brings_a_deleted_queue_back(md: MetadataStore) -> None:
    admin = admin_for(md)
    info, _ = await admin.put("q", {"virtual_partitions": 4})
    grown = await admin.grow("q", info["id"], 8)
    assert grown["virtual_partitions"] == 8
    await check_lineage_matches_map(md, "q")
    await admin.delete("q")
    with pytest.raises(NotFound):
        await admin.grow("q", info["id"], 16)
    assert await md.queues.get("q") is None
    assert "q" not in ((await md.maps.current()) or {"queues": {}})["queues"]


async def test_invalid_config_is_400(md: MetadataStore) -> None:
    with pytest.raises(BadRequest) as info:
        await admin_for(md).put("q", {"virtual_partitions": 3})
    assert info.value.details["field"] == "virtual_partitions"
    assert await md.queues.get("q") is None


async def test_concurrent_creators_agree(md: MetadataStore) -> None:
    admins = [admin_for(md) for _ in range(4)]
    results = await asyncio.gather(*(a.put("shared", {"virtual_partitions": 8}) for a in admins))
    assert sum(created for _, created in results) == 1
    m = await check_lineage_matches_map(md, "shared")
    assert m["epoch"] == 1
    assert all(info["placement"] == m["queues"]["shared"]["placement"] for info, _ in results)


async def test_lost_compare_and_swap_is_retried(md: MetadataStore) -> None:
    admin = admin_for(md)
    await admin.put("first", {"virtual_partitions": 1})
    real_open = md.maps.open_ranges
    real_publish = md.maps.publish_changes
    published: list[bool] = []

    async def counting_publish(changes: Any, expected_epoch: int, **kw: Any) -> bool:
        published.append(await real_publish(changes, expected_epoch, **kw))
        return published[-1]

    async def racing_open(opens: Any, epoch: int, starts: Any = None) -> Any:
        if not published:  # between our lineage and our publish, another publisher wins the epoch

            def add_other(cur: dict[str, Any]) -> dict[str, Any]:
                cur["queues"]["other"] = {"virtual_partitions": 1, "placement": [0]}
                return cur

            await md.maps.update(add_other)
        return await real_open(opens, epoch, starts)

    md.maps.open_ranges = racing_open  # type: ignore[method-assign]
    md.maps.publish_changes = counting_publish  # type: ignore[method-assign]
    try:
        info, _ = await admin.put("mine", {"virtual_partitions": 2})
    finally:
        md.maps.open_ranges = real_open  # type: ignore[method-assign]
        md.maps.publish_changes = real_publish  # type: ignore[method-assign]
    assert published == [True, False, True]  # the rival's win, our lost CAS, our retry
    m = await md.maps.current()
    assert m is not None and set(m["queues"]) == {"first", "other", "mine"} and m["epoch"] == 3
    assert info["epoch"] == 3
    await check_lineage_matches_map(md, "mine")


async def test_missing_split_lineage_is_repaired(md: MetadataStore) -> None:
    admin = admin_for(md)
    await admin.put("q", {"virtual_partitions": 2})
    # a split was published, then the process died before copying lineage
    await md.queues.create_or_update("q", {"virtual_partitions": 8})

    def split(m: dict[str, Any]) -> dict[str, Any]:
        m["queues"]["q"] = {"virtual_partitions": 8, "placement": m["queues"]["q"]["placement"] * 4}
        return m

    await md.maps.update(split)
    assert sorted(await md.maps.lineage_all("q")) == [0, 1]
    await admin.put("q", {})
    await check_lineage_matches_map(md, "q")


async def test_stale_lineage_of_a_former_queue_is_dropped(md: MetadataStore) -> None:
    await md.maps.open_range("q", 0, 3, 0, 0)
    assert await md.maps.seal_range("q", 0, 50, 0)
    await md.maps.open_range("q", 7, 1, 0, 0)
    admin = admin_for(md)
    info, created = await admin.put("q", {"virtual_partitions": 2})
    assert created
    m = await check_lineage_matches_map(md, "q")
    assert all(len(r) == 1 and r[0].from_offset == 0 for r in (await md.maps.lineage_all("q")).values())
    assert m["queues"]["q"]["placement"] == info["placement"]


async def test_get_list_delete(md: MetadataStore) -> None:
    admin = admin_for(md)
    await admin.put("b", {"virtual_partitions": 2})
    await admin.put("a", {"virtual_partitions": 1, "max_message_bytes": 100})
    assert [q["name"] for q in await admin.list()] == ["a", "b"]
    got = await admin.get("a")
    assert got["max_message_bytes"] == 100 and got["epoch"] == 2
    await md.groups.join("b", "g1", "c1", ("prod", "", ""), 10_000)
    token = await md.leases.acquire(group_resource("b", "g1"), "r1", 60_000)
    assert token is not None and await md.acks.save("b", "g1", token, {0: encode_state(1, token, StoredAckState(5))})
    assert await md.client.exists(md.keys.acks("b", "g1"))
    await admin.delete("b")
    with pytest.raises(NotFound) as info:
        await admin.get("b")
    assert info.value.code == "queue_not_found"
    m = await md.maps.current()
    assert m is not None and set(m["queues"]) == {"a"} and m["epoch"] == 3
    assert await md.maps.lineage_all("b") == {}
    assert await md.groups.groups("b") == []
    assert not await md.client.exists(md.keys.acks("b", "g1"), md.keys.lease(group_resource("b", "g1")))
    with pytest.raises(NotFound):
        await admin.delete("b")
    # created again: a new id, placed again, lineage fresh
    info, created = await admin.put("b", {"virtual_partitions": 2})
    assert created and info["id"] != (await admin.get("a"))["id"]
    await check_lineage_matches_map(md, "b")


async def test_delete_takes_the_dead_letter_queues_of_its_groups(md: MetadataStore) -> None:
    from vpq.queue_admin.cluster_queues import dead_letter_queue

    admin = admin_for(md)
    await admin.put("orders", {"virtual_partitions": 2})
    await admin.put("orders.other", {"virtual_partitions": 1})  # a queue, not a DLQ: stays
    long_group = "g" * 120
    for group in ("g1", "g2", long_group):
        await md.groups.join("orders", group, "c1", ("prod", "", ""), 10_000)
    dlq1, dlq_long = dead_letter_queue("orders", "g1"), dead_letter_queue("orders", long_group)
    assert dlq1 == "orders.g1.dlq" and len(dlq_long) <= 128
    for name in (dlq1, dlq_long):
        await admin.put(name, {"virtual_partitions": 1})
    await md.groups.join(dlq1, "readers", "c1", ("prod", "", ""), 10_000)
    await admin.put(dead_letter_queue(dlq1, "readers"), {"virtual_partitions": 1})  # a DLQ's own DLQ
    await admin.delete("orders")
    left = {q["name"] for q in await admin.list()}
    assert left == {"orders.other"}
    assert await md.groups.groups(dlq1) == []
    m = await md.maps.current()
    assert m is not None and set(m["queues"]) == {"orders.other"}
