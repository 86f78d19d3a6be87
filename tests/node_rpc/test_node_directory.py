"""node_rpc/node_directory.py: rendezvous choice (pure) and the directories against real Redis."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.common.errors import Unavailable
from vpq.metadata.leases import pp_resource
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.node_directory import NodeRef, ReadNodeDirectory, WriteNodeDirectory, group_key, rendezvous_pick

node_ids = st.lists(st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True), min_size=1, max_size=8, unique=True)
keys = st.from_regex(r"[A-Za-z0-9._-]{1,20}/[A-Za-z0-9._-]{1,20}", fullmatch=True)


def test_rendezvous_basics() -> None:
    assert rendezvous_pick("q/g", []) is None
    assert rendezvous_pick("q/g", ["only"]) == "only"
    assert group_key("orders", "billing") == "orders/billing"
    nodes = ["r1", "r2", "r3"]
    assert rendezvous_pick("q/g", nodes) == rendezvous_pick("q/g", list(reversed(nodes)))


@settings(max_examples=200, deadline=None)
@given(keys, node_ids, st.data())
def test_rendezvous_moves_only_what_it_must(key: str, nodes: list[str], data: st.DataObject) -> None:
    winner = rendezvous_pick(key, nodes)
    assert winner in nodes
    # removing a node that did not win changes nothing
    others = [n for n in nodes if n != winner]
    if others:
        gone = data.draw(st.sampled_from(others))
        assert rendezvous_pick(key, [n for n in nodes if n != gone]) == winner
    # adding a node either keeps the winner or makes the newcomer win
    newcomer = data.draw(st.from_regex(r"[a-z0-9]{9,10}", fullmatch=True))
    assert rendezvous_pick(key, nodes + [newcomer]) in (winner, newcomer)


def test_rendezvous_spreads_groups() -> None:
    nodes = ["r1", "r2", "r3", "r4"]
    counts = Counter(rendezvous_pick(f"q{i}/g", nodes) for i in range(4000))
    assert set(counts) == set(nodes)
    assert min(counts.values()) > 800  # each of 4 nodes gets at least 20% of 4000 groups


async def test_write_directory_follows_leases(md: MetadataStore) -> None:
    await md.nodes.register_node("w1", "write", "127.0.0.1:1001", 60_000)
    await md.nodes.register_node("w2", "write", "127.0.0.1:1002", 60_000)
    for pp in range(3):
        assert await md.leases.acquire(pp_resource(pp), "w1" if pp < 2 else "w2", 60_000)
    d = WriteNodeDirectory(md.nodes, md.leases, 4)
    assert d.cached(0) is None
    assert await d.owner(0) == NodeRef("w1", "127.0.0.1:1001")
    assert d.cached(2) == NodeRef("w2", "127.0.0.1:1002")
    with pytest.raises(Unavailable) as info:
        await d.owner(3)  # nobody holds pp 3
    assert info.value.code == "partition_unowned"
    # pp 9 is outside 0..K-1 but is tracked once asked about
    await md.leases.acquire(pp_resource(9), "w2", 60_000)
    assert (await d.owner(9)).node_id == "w2"
    assert 9 in d.partitions
    # ownership moves: the cache keeps the old owner until invalidated
    lease = await md.leases.owner(pp_resource(0))
    assert lease is not None
    await md.leases.release(pp_resource(0), "w1", lease.token)
    await md.leases.acquire(pp_resource(0), "w2", 60_000)
    assert d.cached(0) == NodeRef("w1", "127.0.0.1:1001")
    d.invalidate(0)
    assert (await d.owner(0)).node_id == "w2"


async def test_write_directory_ignores_leases_of_dead_nodes(md: MetadataStore) -> None:
    await md.nodes.register_node("w1", "write", "127.0.0.1:1001", 60_000)
    await md.leases.acquire(pp_resource(0), "w1", 60_000)
    d = WriteNodeDirectory(md.nodes, md.leases, 1)
    await d.refresh()
    assert d.cached(0) is not None
    await md.nodes.deregister_node("w1", "write")
    await d.on_event({"type": "node", "role": "write", "op": "deregister", "node_id": "w1"})
    assert d.cached(0) is None and d.live_nodes() == {}


async def test_read_directory_rendezvous_owner_and_failover(md: MetadataStore) -> None:
    d = ReadNodeDirectory(md.nodes, down_ttl_s=60)
    with pytest.raises(Unavailable) as info:
        await d.node_for("q", "g")
    assert info.value.code == "no_read_nodes"
    for i in (1, 2, 3):
        await md.nodes.register_node(f"r{i}", "read", f"127.0.0.1:200{i}", 60_000)
    await d.refresh()
    chosen = await d.node_for("q", "g")
    assert chosen.node_id == rendezvous_pick("q/g", ["r1", "r2", "r3"])
    assert await d.node_for("q", "g") == chosen
    # a 409 named another owner: remembered for the group
    other = next(n for n in ("r1", "r2", "r3") if n != chosen.node_id)
    assert (await d.learn_owner("q", "g", other)).node_id == other
    assert (await d.node_for("q", "g")).node_id == other
    assert await d.learn_owner("q", "g", "ghost") is None
    # the owner is unreachable: it leaves the rendezvous choice, the group goes elsewhere
    d.node_down(other)
    again = await d.node_for("q", "g")
    assert again.node_id != other
    assert again.node_id == rendezvous_pick("q/g", [n for n in ("r1", "r2", "r3") if n != other])


async def test_read_directory_down_nodes_come_back(md: MetadataStore) -> None:
    now = [0.0]
    d = ReadNodeDirectory(md.nodes, down_ttl_s=5, clock=lambda: now[0])
    await md.nodes.register_node("r1", "read", "127.0.0.1:2001", 60_000)
    await md.nodes.register_node("r2", "read", "127.0.0.1:2002", 60_000)
    await d.refresh()
    first = (await d.node_for("a", "b")).node_id
    d.node_down(first)
    assert (await d.node_for("a", "b")).node_id != first
    now[0] = 6.0
    d.forget("a", "b")
    assert (await d.node_for("a", "b")).node_id == first
    # when every node is down the choice falls back to all of them
    d.node_down("r1")
    d.node_down("r2")
    d.forget("a", "b")
    assert (await d.node_for("a", "b")).node_id == first
