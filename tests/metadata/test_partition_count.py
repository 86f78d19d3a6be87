"""metadata/partition_count.py: the cluster's physical-partition count, set once."""

from __future__ import annotations

import asyncio

import pytest

from vpq.metadata.partition_count import partition_count_key
from vpq.metadata.store import MetadataStore


async def test_partition_count_is_set_once(md: MetadataStore) -> None:
    assert await md.read_partition_count() is None
    results = await asyncio.gather(*(md.get_or_init_partition_count(k) for k in (3, 5, 7)))
    assert len(set(results)) == 1 and results[0] in (3, 5, 7)
    assert await md.get_or_init_partition_count(64) == results[0]
    assert await md.read_partition_count() == results[0]
    await md.client.set(partition_count_key(md.keys), "zero")
    with pytest.raises(ValueError):
        await md.read_partition_count()
    with pytest.raises(ValueError):
        await md.get_or_init_partition_count(0)
