"""GroupMembers batches concurrent joins: a burst of joins is written to the metadata
store in a few calls and applied with a reassignment per call, every join answering
only once written and applied; a failed write fails exactly the joins of its call."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from vpq.isolation.context import IsolationContext
from vpq.metadata.errors import MetadataUnavailable
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import DeliveryConfig
from vpq.read_nodes.group_members import GroupMembers


class Groups:
    """The ``join_many`` of ``GroupStore``, recorded; each call waits for ``gate``."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.gate = asyncio.Event()
        self.failing: set[int] = set()  # the calls (0: the first) that fail

    async def join_many(self, queue: str, group: str, joins: list[tuple[str, Any, str]], timeout_ms: int) -> list[int]:
        call = len(self.calls)
        self.calls.append([cid for cid, _ctx, _start in joins])
        await self.gate.wait()
        if call in self.failing:
            raise MetadataUnavailable("redis is away")
        return list(range(1, len(joins) + 1))


class Store:
    def __init__(self) -> None:
        self.groups = Groups()


async def settle() -> None:
    """Let every task that can run, run (a few loop turns)."""
    for _ in range(5):
        await asyncio.sleep(0)


def members(store: Store) -> tuple[GroupMembers, GroupDelivery, list[int]]:
    config = DeliveryConfig(
        ordering="key", max_deliveries=5, visibility_timeout_ms=30_000, max_unacked=1000, max_acked_above=None,
        virtual_partitions=16,
    )
    delivery = GroupDelivery(config)
    m = GroupMembers(
        store, "q", "g", delivery, session_timeout_ms=10_000, heartbeat_interval_ms=1000, max_vps=4096  # type: ignore[arg-type]
    )
    reassigned: list[int] = []
    reassign = m.reassign

    def counting(queue_vps: int, now_ms: int) -> None:
        reassigned.append(len(m.members))
        reassign(queue_vps, now_ms)

    m.reassign = counting  # type: ignore[method-assign]
    return m, delivery, reassigned


async def test_a_burst_of_joins_is_written_in_two_calls_and_applied_with_two_reassignments() -> None:
    store = Store()
    m, delivery, reassigned = members(store)
    ctx = IsolationContext()
    first = asyncio.ensure_future(m.join("c0", ctx, "earliest", 16, 1000))
    await settle()
    assert store.groups.calls == [["c0"]]
    rest = [asyncio.ensure_future(m.join(f"c{i}", ctx, "earliest", 16, 1000 + i)) for i in range(1, 64)]
    await settle()
    assert not first.done() and not any(t.done() for t in rest)  # nothing answers before it is written
    assert m.members == {}
    store.groups.gate.set()
    await asyncio.gather(first, *rest)
    assert store.groups.calls == [["c0"], [f"c{i}" for i in range(1, 64)]]
    assert reassigned == [1, 64]
    assert set(m.members) == {f"c{i}" for i in range(64)}
    assert all(delivery.is_member(f"c{i}") for i in range(64))
    assert m.assignment is not None
    owned = sorted(vp for i in range(64) for vp in m.assignment.vps_of(f"c{i}"))
    assert owned == list(range(64))  # V grew to 64: one vp each


async def test_a_failed_write_fails_the_joins_of_its_call_only() -> None:
    store = Store()
    m, _delivery, _ = members(store)
    ctx = IsolationContext()
    store.groups.failing = {0}
    first = asyncio.ensure_future(m.join("a", ctx, "earliest", 16, 1000))
    await settle()
    queued = [asyncio.ensure_future(m.join(cid, ctx, "earliest", 16, 1000)) for cid in ("b", "c")]
    await settle()
    store.groups.gate.set()
    with pytest.raises(MetadataUnavailable):
        await first
    for t in queued:
        await t
    assert set(m.members) == {"b", "c"}
    await m.join("a", ctx, "earliest", 16, 2000)
    assert set(m.members) == {"a", "b", "c"}
    assert store.groups.calls == [["a"], ["b", "c"], ["a"]]


async def test_a_cancelled_join_leaves_the_others_of_its_call_served() -> None:
    store = Store()
    m, _delivery, _ = members(store)
    ctx = IsolationContext()
    joins = [asyncio.ensure_future(m.join(cid, ctx, "earliest", 16, 1000)) for cid in ("a", "b")]
    await settle()
    joins[0].cancel()
    store.groups.gate.set()
    await joins[1]
    assert joins[0].cancelled()
    assert set(m.members) == {"a", "b"}  # written before the cancel could stop it: applied (a rejoin is harmless)
