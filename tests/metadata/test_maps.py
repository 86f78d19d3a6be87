from __future__ import annotations

import asyncio

import pytest

from vpq.metadata.maps import LineageRange
from vpq.metadata.store import MetadataStore


def _map(epoch: int, pp: int) -> dict:
    return {"epoch": epoch, "queues": {"q": {"virtual_partitions": 2, "placement": [pp, pp]}}}


async def test_publish_is_compare_and_swap(md: MetadataStore) -> None:
    assert await md.maps.current() is None
    assert await md.maps.epoch() == 0
    assert await md.maps.publish(_map(1, 0), 0)
    assert not await md.maps.publish(_map(1, 1), 0)  # epoch 0 is gone
    assert await md.maps.publish(_map(1, 0), 0)  # a retry of the winning publish
    with pytest.raises(ValueError):
        await md.maps.publish(_map(3, 0), 1)  # must be expected + 1
    with pytest.raises(ValueError):
        await md.maps.publish({"epoch": 2, "queues": {"q": {"virtual_partitions": 3, "placement": [0, 0, 0]}}}, 1)
    assert await md.maps.current() == _map(1, 0)


async def test_two_writers_race_and_exactly_one_wins(make_store) -> None:
    a, b = make_store(), make_store()
    await a.start()
    await b.start()
    rounds = 200
    for epoch in range(rounds):
        ok_a, ok_b = await asyncio.gather(a.maps.publish(_map(epoch + 1, 1), epoch), b.maps.publish(_map(epoch + 1, 2), epoch))
        assert ok_a != ok_b, f"round {epoch}: a={ok_a} b={ok_b}"
        winner = 1 if ok_a else 2
        assert await a.maps.current() == _map(epoch + 1, winner)
    assert await b.maps.epoch() == rounds


async def test_update_loop_serializes_concurrent_changes(make_store) -> None:
    stores = [make_store() for _ in range(4)]

    def add(name: str):
        def fn(m: dict) -> dict:
            m["queues"][name] = {"virtual_partitions": 1, "placement": [0]}
            return m

        return fn

    await asyncio.gather(*(s.maps.update(add(f"q{i}")) for i, s in enumerate(stores)))
    final = await stores[0].maps.current()
    assert final is not None
    assert final["epoch"] == 4
    assert sorted(final["queues"]) == ["q0", "q1", "q2", "q3"]


async def test_lineage_open_seal_move_and_fencing(md: MetadataStore) -> None:
    assert await md.maps.publish(_map(1, 0), 0)
    assert await md.maps.lineage("q", 0) == []
    assert not await md.maps.open_range("q", 0, 0, 0, 2)  # epoch 2 does not exist yet
    assert await md.maps.open_range("q", 0, 0, 0, 1)
    assert await md.maps.open_range("q", 0, 0, 0, 1)  # idempotent
    assert not await md.maps.open_range("q", 0, 1, 5, 1)  # still open: seal first
    assert await md.maps.publish(_map(2, 1), 1)
    assert await md.maps.move_range("q", 0, 100, 1, 40, 2)
    assert await md.maps.move_range("q", 0, 100, 1, 40, 2)  # idempotent
    assert await md.maps.lineage("q", 0) == [LineageRange(0, 0, 100), LineageRange(1, 40, None)]
    assert not await md.maps.seal_range("q", 0, 50, 1)  # stale epoch is fenced
    assert not await md.maps.seal_range("q", 0, 39, 2)  # below the range start
    assert await md.maps.seal_range("q", 0, 70, 2)
    assert not await md.maps.open_range("q", 0, 0, 200, 1)  # stale epoch
    assert not await md.maps.open_range("q", 0, 1, 60, 2)  # overlaps the sealed range on pp 1
    assert await md.maps.open_range("q", 0, 0, 200, 2)
    assert await md.maps.lineage("q", 0) == [
        LineageRange(0, 0, 100),
        LineageRange(1, 40, 70),
        LineageRange(0, 200, None),
    ]


async def test_move_range_with_a_stale_epoch_is_refused(md: MetadataStore) -> None:
    """A remapper still working from epoch 2 cannot move a range a newer epoch changed."""
    for epoch in (1, 2, 3):
        assert await md.maps.publish(_map(epoch, epoch % 2), epoch - 1)
    assert await md.maps.open_range("q", 0, 0, 0, 3)  # the open range was written at epoch 3
    assert not await md.maps.move_range("q", 0, 100, 1, 100, 2)
    assert await md.maps.lineage("q", 0) == [LineageRange(0, 0, None)]
    assert await md.maps.open_range("q", 1, 0, 0, 1)
    assert await md.maps.move_range("q", 1, 50, 1, 50, 3)  # epoch 3 moved vp 1
    assert not await md.maps.move_range("q", 1, 80, 0, 80, 2)  # epoch 2 may not move it again
    assert await md.maps.lineage("q", 1) == [LineageRange(0, 0, 50), LineageRange(1, 50, None)]


async def test_lineage_split_and_bulk_read(md: MetadataStore) -> None:
    assert await md.maps.publish(_map(1, 0), 0)
    big = 2**52 + 3  # offsets stay exact through Lua
    assert await md.maps.open_range("q", 0, 0, big, 1)
    assert await md.maps.open_range("q", 1, 2, 5, 1)
    assert await md.maps.split_lineage("q", 2, 1) == 2
    assert await md.maps.split_lineage("q", 2, 1) == 0
    all_ = await md.maps.lineage_all("q")
    assert all_ == {
        0: [LineageRange(0, big, None)],
        1: [LineageRange(2, 5, None)],
        2: [LineageRange(0, big, None)],
        3: [LineageRange(2, 5, None)],
    }
    assert await md.maps.seal_range("q", 2, big + 10, 1)
    assert (await md.maps.lineage("q", 0))[0].to_offset is None  # children are independent
    await md.maps.delete_lineage("q")
    assert await md.maps.lineage_all("q") == {}


async def test_bulk_open_read_and_delete_lineage(md: MetadataStore) -> None:
    assert await md.maps.publish(_map(1, 0), 0)
    assert await md.maps.open_range("b", 1, 3, 0, 1)  # a concurrent creator got to b's vp 1 first
    got = await md.maps.open_ranges([("a", 0, 1), ("a", 1, 2), ("b", 0, 0), ("b", 1, 0)], 1)
    assert got == {
        "a": {0: [LineageRange(1, 0, None)], 1: [LineageRange(2, 0, None)]},
        "b": {0: [LineageRange(0, 0, None)], 1: [LineageRange(3, 0, None)]},  # vp 1 left as it was
    }
    # each opened range is exactly what open_range would have written (its retry agrees)
    assert await md.maps.open_range("a", 1, 2, 0, 1)
    assert not await md.maps.open_range("a", 1, 0, 0, 1)
    # an epoch the stored map has not reached opens nothing, and the lineage is still read
    assert await md.maps.open_ranges([("a", 2, 0), ("z", 0, 0)], 2) == {"a": got["a"], "z": {}}
    assert await md.maps.open_ranges([], 1) == {}
    assert await md.maps.lineage_many(["b", "a", "none"]) == {"b": got["b"], "a": got["a"], "none": {}}
    await md.maps.delete_lineages(["a", "b", "none"])
    assert await md.maps.lineage_many(["a", "b"]) == {"a": {}, "b": {}}
    await md.maps.delete_lineages([])


async def test_map_is_stored_per_queue_with_its_changes_and_load(md: MetadataStore) -> None:
    m = {"queues": {"b": {"virtual_partitions": 1, "placement": [0]}, "a": {"placement": [1, 2], "virtual_partitions": 2}}}
    assert await md.maps.publish({"epoch": 1, **m}, 0, checked=True)
    stored = await md.client.hgetall(md.keys.map_queues())
    assert stored == {"a": '{"placement":[1,2],"virtual_partitions":2}', "b": '{"placement":[0],"virtual_partitions":1}'}
    assert await md.client.hget(md.keys.map(), "body") is None  # no whole-map document any more
    assert await md.maps.load() == {0: 1, 1: 1, 2: 1}
    assert await md.maps.delta(0) == (1, [("a", 1), ("b", 1)])
    # a publish writes only what changed: b moves, a is left alone, c comes, nothing else is indexed
    assert await md.maps.publish_changes({"b": {"virtual_partitions": 1, "placement": [2]},
                                          "c": {"virtual_partitions": 1, "placement": [2]}}, 1)
    assert await md.maps.delta(1) == (2, [("b", 2), ("c", 2)])
    assert await md.maps.load() == {1: 1, 2: 3}
    assert await md.maps.entries(["a", "zz"]) == (2, {"a": {"virtual_partitions": 2, "placement": [1, 2]}})
    # a removal keeps a tombstone in the change index, so caches learn that the queue went
    assert await md.maps.publish({"epoch": 3, "queues": {"a": m["queues"]["a"], "c": {"virtual_partitions": 1,
                                                                                     "placement": [2]}}}, 2)
    assert await md.maps.delta(2) == (3, [("b", 3)])
    assert await md.maps.load() == {1: 1, 2: 2}
    assert sorted((await md.maps.current())["queues"]) == ["a", "c"]
    # a retried publish_changes is answered True again, a different one at the same epoch is not
    assert await md.maps.publish_changes({"c": {"virtual_partitions": 2, "placement": [2, 0]}}, 3)
    assert await md.maps.publish_changes({"c": {"virtual_partitions": 2, "placement": [2, 0]}}, 3)
    assert not await md.maps.publish_changes({"c": {"virtual_partitions": 2, "placement": [0, 0]}}, 3)
    assert await md.maps.load() == {0: 1, 1: 1, 2: 2}
    # registry records and entries are read together, by name or by id
    rec, _ = await md.queues.create_or_update("c", {"virtual_partitions": 2})
    epoch, rows = await md.maps.load_queues(["a"], [rec.id, 999])
    assert epoch == 4 and [(n, r is not None, e) for n, r, e in rows] == [
        ("a", False, {"virtual_partitions": 2, "placement": [1, 2]}),
        ("c", True, {"virtual_partitions": 2, "placement": [2, 0]}),
    ]
    # unchecked publishes still refuse malformed entries
    with pytest.raises(ValueError):
        await md.maps.publish({"epoch": 5, "queues": {"a": {"virtual_partitions": 2, "placement": [0]}}}, 4)
    with pytest.raises(ValueError):
        await md.maps.publish_changes({"a": {"virtual_partitions": 3, "placement": [0, 0, 0]}}, 4)


async def test_publish_cost_does_not_grow_with_the_map(md: MetadataStore) -> None:
    """What one publish sends and writes is its own changes: counted in Redis commands."""
    many = {f"q{i}": {"virtual_partitions": 1, "placement": [i % 4]} for i in range(5000)}
    assert await md.maps.publish_changes(many, 0, checked=True)

    async def sent() -> tuple[int, int]:
        stats, cmds = await md.client.info("stats"), await md.client.info("commandstats")
        writes = sum(int(v["calls"]) for k, v in cmds.items() if k in ("cmdstat_hset", "cmdstat_zadd", "cmdstat_hdel"))
        return int(stats["total_net_input_bytes"]), writes

    bytes0, writes0 = await sent()
    assert await md.maps.publish_changes({"new": {"virtual_partitions": 1, "placement": [1]}}, 1)
    bytes1, writes1 = await sent()
    assert bytes1 - bytes0 < 2000  # the map of 5000 queues is ~200 kB: none of it travels
    assert writes1 - writes0 <= 3  # the entry, its change index, the epoch
    assert await md.maps.epoch() == 2 and (await md.maps.load())[1] == 1251


async def test_bulk_open_starts_each_pp_at_the_given_offset(md: MetadataStore) -> None:
    assert await md.maps.publish(_map(1, 0), 0)
    got = await md.maps.open_ranges([("a", 0, 1), ("a", 1, 2), ("a", 2, 3)], 1, {1: 500, 2: 0})
    assert got == {"a": {0: [LineageRange(1, 500, None)], 1: [LineageRange(2, 0, None)],
                         2: [LineageRange(3, 0, None)]}}  # pp 3 unknown: from 0
    with pytest.raises(ValueError):
        await md.maps.open_ranges([("b", 0, 1)], 1, {1: -1})
    assert await md.maps.lineage_all("b") == {}


async def test_every_publish_is_recorded_once_in_the_history(md: MetadataStore) -> None:
    assert await md.maps.history(10) == []
    note = {"kind": "queues", "queues": [{"queue": "q", "change": "created", "virtual_partitions": 2}]}
    assert await md.maps.publish(_map(1, 0), 0, note=note)
    assert await md.maps.publish(_map(1, 0), 0, note=note)  # a retry records nothing more
    assert not await md.maps.publish(_map(1, 1), 0)  # a lost CAS records nothing
    await md.maps.update(lambda m: _map(0, 1))
    newest, first = await md.maps.history(10)
    assert (newest["epoch"], newest["kind"], newest["queues"], newest["moves"]) == (2, "update", [], [])
    assert (first["epoch"], first["kind"], first["queues"]) == (1, "queues", note["queues"])
    assert first["imbalance_before"] is None and first["moves_total"] == 0
    assert newest["time_ms"] >= first["time_ms"] > 1_700_000_000_000
    assert [e["epoch"] for e in await md.maps.history(1)] == [2]
    with pytest.raises(ValueError):
        await md.maps.history(0)


async def test_a_map_kept_as_one_document_is_migrated_per_queue(md: MetadataStore) -> None:
    import json

    old = {"epoch": 3, "queues": {"a": {"virtual_partitions": 2, "placement": [0, 1]}, "b": {"virtual_partitions": 1,
                                                                                          "placement": [1]}}}
    await md.client.hset(md.keys.map(), mapping={"epoch": 3, "body": json.dumps(old)})
    assert await md.maps.migrate_whole_map()
    assert await md.client.hget(md.keys.map(), "body") is None
    assert await md.maps.current() == old
    assert await md.maps.delta(0) == (3, [("a", 3), ("b", 3)])
    assert await md.maps.load() == {0: 1, 1: 2}
    assert not await md.maps.migrate_whole_map()  # done once
    assert await md.maps.publish_changes({"a": None}, 3)
    assert await md.maps.load() == {1: 1}
