"""metadata/cluster_shape.py: the cluster's shape, fixed once, and durable write-node slots."""

from __future__ import annotations

import asyncio

import pytest

from vpq.metadata.cluster_shape import ClusterShape, SlotError, mismatches, shape_key
from vpq.metadata.store import MetadataStore


async def test_shape_is_created_once_and_sets_the_partition_count(md: MetadataStore) -> None:
    assert await md.read_shape() is None
    wants = [ClusterShape(k, 1, 2) for k in (3, 5, 7)]
    results = await asyncio.gather(*(md.get_or_create_shape(w) for w in wants))
    assert len(set(results)) == 1 and results[0] in wants
    assert await md.get_or_create_shape(ClusterShape(64, 2, 3)) == results[0]
    assert await md.read_shape() == results[0]
    assert await md.read_partition_count() == results[0].physical_partitions


async def test_a_cluster_with_a_count_keeps_it(md: MetadataStore) -> None:
    await md.get_or_init_partition_count(6)  # created by `vpq up`
    assert await md.get_or_create_shape(ClusterShape(4, 2, 2)) == ClusterShape(6, 2, 2)
    assert await md.read_partition_count() == 6


async def test_damaged_shape_is_an_error(md: MetadataStore) -> None:
    await md.client.hset(shape_key(md.keys), mapping={"physical_partitions": "x", "replication_factor": 1, "write_nodes": 1})
    with pytest.raises(ValueError, match="physical_partitions"):
        await md.read_shape()


def test_mismatches_name_both_values() -> None:
    stored = ClusterShape(4, 2, 3)
    assert mismatches(stored, {"physical_partitions": 4, "write_nodes": 3}) == []
    assert mismatches(stored, {"physical_partitions": 8, "replication_factor": 2}) == [
        "physical_partitions 8 (the cluster has 4)"
    ]
    with pytest.raises(ValueError):
        ClusterShape(0, 1, 1)


async def test_slots_are_durable_per_node_id(md: MetadataStore) -> None:
    assert await md.claim_write_slot("a", 3) == 0
    assert await md.claim_write_slot("b", 3) == 1
    assert await md.claim_write_slot("a", 3) == 0  # a restart keeps its index
    assert await md.claim_write_slot("c", 3, index=2) == 2
    assert await md.claim_write_slot("c", 3) == 2
    with pytest.raises(SlotError, match="all 3 write-node slots are taken"):
        await md.claim_write_slot("d", 3)
    with pytest.raises(SlotError, match="already belongs to write node b"):
        await md.claim_write_slot("d", 3, index=1)
    with pytest.raises(SlotError, match="already holds index 0, not 1"):
        await md.claim_write_slot("a", 3, index=1)
    with pytest.raises(SlotError, match="outside"):
        await md.claim_write_slot("d", 3, index=3)


async def test_concurrent_claims_get_distinct_slots(md: MetadataStore) -> None:
    got = await asyncio.gather(*(md.claim_write_slot(f"n{i}", 4) for i in range(4)))
    assert sorted(got) == [0, 1, 2, 3]
