"""Group commit of map changes: the pure edits (queue_admin/cluster_placement.py) and
``MapBatcher`` / ``QueueAdmin`` against a real redis-server."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.common.errors import Unavailable
from vpq.metadata.store import MetadataStore
from vpq.queue_admin.cluster_placement import MapEdit, apply_edits, placement_load
from vpq.queue_admin.cluster_queues import QueueAdmin
from vpq.queue_admin.map_batcher import MapBatcher, Placed
from vpq.traffic.cluster_traffic import TrafficMeter

# ---------------------------------------------------------------- pure edits

_edit = st.one_of(
    st.builds(
        MapEdit,
        st.just("place"),
        st.sampled_from("abcde"),
        st.sampled_from([1, 2, 4, 8]),
        st.one_of(st.none(), st.lists(st.integers(0, 5), min_size=1, max_size=4).map(tuple)),
    ).filter(lambda e: e.placement is None or len(e.placement) & (len(e.placement) - 1) == 0),
    st.builds(MapEdit, st.just("remove"), st.sampled_from("abcde")),
)


def _reference(queues: dict[str, Any], edits: list[MapEdit]) -> dict[str, Any]:
    """The edits applied one by one, the obvious way."""
    out = {k: {"virtual_partitions": v["virtual_partitions"], "placement": list(v["placement"])} for k, v in queues.items()}
    for e in edits:
        if e.kind == "remove":
            out.pop(e.queue, None)
        elif e.queue not in out:
            if e.placement is not None:
                out[e.queue] = {"virtual_partitions": len(e.placement), "placement": list(e.placement)}
        else:
            q = out[e.queue]
            while q["virtual_partitions"] < e.virtual_partitions:
                q = {"virtual_partitions": q["virtual_partitions"] * 2, "placement": q["placement"] * 2}
            out[e.queue] = q
    return out


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from("abc"), st.sampled_from([[0], [1, 2], [3, 3, 0, 1]])), st.lists(_edit, max_size=12))
def test_apply_edits_is_the_edits_in_order_with_the_load_kept(start: dict[str, list[int]], edits: list[MapEdit]) -> None:
    queues = {k: {"virtual_partitions": len(p), "placement": p} for k, p in start.items()}
    snapshot = repr(queues)
    out, load, changed = apply_edits(queues, placement_load(queues), edits)
    assert out == _reference(queues, edits)
    assert load == placement_load(out)
    assert changed or out == queues  # (edits that cancel out may still count as a change)
    assert changed == any(_reference(queues, edits[: i + 1]) != _reference(queues, edits[:i]) for i in range(len(edits)))
    assert repr(queues) == snapshot  # inputs untouched


def test_unknown_edit_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        apply_edits({}, {}, [MapEdit("rename", "a")])


# ---------------------------------------------------------------- against Redis


@pytest.fixture
def md(make_store: Callable[[], MetadataStore]) -> MetadataStore:
    """A store of its own (``make_store``: tests/conftest.py), as one gateway process has."""
    return make_store()


def admin_for(md: MetadataStore, k: int = 4, **kw: Any) -> QueueAdmin:
    return QueueAdmin(md, lambda: list(range(k)), TrafficMeter(), **kw)


async def check_placed_with_lineage(md: MetadataStore, names: list[str]) -> dict[str, Any]:
    m = await md.maps.current()
    assert m is not None
    lineage = await md.maps.lineage_many(names)
    for name in names:
        q = m["queues"][name]
        assert sorted(lineage[name]) == list(range(q["virtual_partitions"])), name
        for vp, ranges in lineage[name].items():
            assert ranges == [(q["placement"][vp], 0, None)], name
    return m


async def test_concurrent_puts_share_few_publishes_and_stay_balanced(md: MetadataStore) -> None:
    changes: list[tuple[str, int]] = []

    async def changed(name: str, m: Any) -> None:
        changes.append((name, int(m["epoch"])))

    admin = admin_for(md, on_queue_change=changed)
    names = [f"q{i}" for i in range(64)]
    results = await asyncio.gather(*(admin.put(n, {"virtual_partitions": 1}) for n in names))
    assert all(created for _, created in results)
    m = await check_placed_with_lineage(md, names)
    publishes = admin.batcher.publishes
    assert m["epoch"] == publishes and publishes <= 16  # one CAS per commit, not per queue
    for info, _ in results:  # each answer comes from a published map that places the queue
        assert 1 <= info["epoch"] <= publishes and len(info["placement"]) == 1
        assert info["placement"] == m["queues"][info["name"]]["placement"]
    assert sorted(n for n, _ in changes) == sorted(names)
    # planning inside one commit sees the queues planned before it: perfectly even
    assert Counter(q["placement"][0] for q in m["queues"].values()) == {0: 16, 1: 16, 2: 16, 3: 16}


async def test_creators_in_several_processes_agree(make_store: Callable[[], MetadataStore]) -> None:
    admins = [admin_for(make_store(), k=8) for _ in range(3)]
    shared = [f"s{i}" for i in range(20)]
    own = [[f"a{a}-{i}" for i in range(20)] for a in range(3)]

    async def put(admin: QueueAdmin, name: str) -> tuple[dict[str, Any], bool]:
        for _ in range(20):  # placement_conflict is a retryable 503
            try:
                return await admin.put(name, {"virtual_partitions": 4})
            except Unavailable as exc:
                assert exc.code == "placement_conflict"
        raise AssertionError("never placed")

    results = await asyncio.gather(
        *(put(a, n) for i, a in enumerate(admins) for n in shared + own[i])
    )
    md = admins[0]._md
    m = await check_placed_with_lineage(md, shared + sum(own, []))
    assert len(m["queues"]) == 80
    assert sum(created for info, created in results if info["name"] in shared) == len(shared)
    for info, _ in results:
        assert info["placement"] == m["queues"][info["name"]]["placement"]


async def test_kept_map_is_never_trusted_for_already_placed(make_store: Callable[[], MetadataStore]) -> None:
    a, b = admin_for(make_store()), admin_for(make_store())
    await a.put("q", {"virtual_partitions": 2})  # a keeps the map that places q
    await b.delete("q")  # another gateway removes it
    info, created = await a.put("q", {"virtual_partitions": 2})
    assert created and info["placement"]
    m = await check_placed_with_lineage(a._md, ["q"])
    assert m["epoch"] == 3 and info["epoch"] == 3


async def test_requests_for_one_name_keep_their_order(md: MetadataStore) -> None:
    batcher = MapBatcher(md.maps, lambda: [0, 1])
    await batcher.place("x", 2)
    removed, placed, again = await asyncio.gather(batcher.remove("x"), batcher.place("x", 4), batcher.remove("x"))
    assert "x" not in removed["queues"]
    assert isinstance(placed, Placed) and placed.map["queues"]["x"]["virtual_partitions"] == 4
    assert "x" not in again["queues"]
    assert removed["epoch"] < placed.map["epoch"] < again["epoch"]
    assert (await md.maps.current()) == again


async def test_lost_metadata_is_seen_before_creating_from_the_kept_map(md: MetadataStore) -> None:
    admin = admin_for(md)
    for i in range(3):
        await admin.put(f"old{i}", {})
    await md.client.flushdb()  # Redis lost everything: the kept map (epoch 3) is ahead of it
    # the stored epoch (0) differs from the kept one: the commit starts from a fresh read
    # instead of opening lineage for an epoch that does not exist
    info, _ = await admin.put("new", {"virtual_partitions": 2})
    m = await check_placed_with_lineage(md, ["new"])
    assert m["epoch"] == 1 == info["epoch"] and set(m["queues"]) == {"new"}


async def test_stop_fails_waiting_requests_and_cancelled_waiters_are_dropped(md: MetadataStore) -> None:
    batcher = MapBatcher(md.maps, lambda: [0])
    gate = asyncio.Event()
    real = md.maps.lineage_many

    async def slow(names: Any) -> Any:
        await gate.wait()
        return await real(names)

    md.maps.lineage_many = slow  # type: ignore[method-assign]
    first = asyncio.create_task(batcher.place("a", 1))
    await asyncio.sleep(0.05)  # its commit is waiting inside lineage_many
    dropped = asyncio.create_task(batcher.place("b", 1))
    waiting = asyncio.create_task(batcher.place("c", 1))
    await asyncio.sleep(0)
    dropped.cancel()
    await batcher.stop()
    for t in (first, waiting):
        with pytest.raises(Unavailable):
            await t
    assert dropped.cancelled()
    md.maps.lineage_many = real  # type: ignore[method-assign]
    # the batcher works again afterwards, and never placed the cancelled one
    placed = await batcher.place("c", 1)
    assert set(placed.map["queues"]) == {"c"}


async def test_new_queues_start_at_the_log_ends_read_before_their_publish(md: MetadataStore) -> None:
    asked: list[int] = []

    async def log_ends() -> dict[int, int]:
        asked.append(await md.maps.epoch())
        return {0: 100, 1: 250, 2: 7}  # pp 3: its owner did not answer

    admin = admin_for(md, log_ends=log_ends)
    try:
        await admin.put("q", {"virtual_partitions": 8})
        m = await md.maps.current()
        assert m is not None and asked and max(asked) < m["epoch"]  # read before the publish
        starts = {0: 100, 1: 250, 2: 7, 3: 0}
        for vp, ranges in (await md.maps.lineage_all("q")).items():
            pp = m["queues"]["q"]["placement"][vp]
            assert ranges == [(pp, starts[pp], None)]
        await admin.put("q", {"virtual_partitions": 8})  # idempotent: the lineage is kept
        assert len(await md.maps.lineage_all("q")) == 8
    finally:
        await admin.stop()


async def test_unavailable_log_ends_start_new_queues_at_zero(md: MetadataStore) -> None:
    async def log_ends() -> dict[int, int]:
        raise OSError("write node away")

    admin = admin_for(md, log_ends=log_ends)
    try:
        await admin.put("q", {"virtual_partitions": 4})
        await check_placed_with_lineage(md, ["q"])
    finally:
        await admin.stop()


async def test_a_split_by_a_batcher_with_an_old_map_copies_the_parents_lineage(
    make_store: Callable[[], MetadataStore],
) -> None:
    # The read node's batcher last committed before the gateway created "q"; when the
    # read node then grows "q" for its consumers, the children must inherit their
    # parents' ranges (from the creation's offsets), not start at today's log ends,
    # or every record written before the split is outside its vp's lineage.
    async def far_ends() -> dict[int, int]:
        return {pp: 10_000 for pp in range(4)}

    gateway, read_node = admin_for(make_store()), admin_for(make_store(), log_ends=far_ends)
    try:
        await read_node.put("other", {"virtual_partitions": 2})  # the read node's batcher keeps this map
        await gateway.put("q", {"virtual_partitions": 4})
        parents = await gateway._md.maps.lineage_all("q")
        assert all(r == [(r[0].pp, 0, None)] for r in parents.values())
        await read_node.place("q", 16)
        m = await check_placed_with_lineage(gateway._md, ["q"])
        assert m["queues"]["q"]["virtual_partitions"] == 16
        lineage = await gateway._md.maps.lineage_all("q")
        for vp in range(16):
            assert lineage[vp] == parents[vp % 4], vp
    finally:
        await gateway.stop()
        await read_node.stop()
