"""Cluster-wide facts fixed when a cluster is created: the physical-partition count.

Contract:

- The count lives in Redis under ``{prefix}:cluster:physical_partitions`` (a decimal
  string). ``get_or_init_partition_count(client, keys, default)`` stores ``default``
  when the key is missing (``SET NX`` inside one Lua script, so of any number of
  concurrent first starters exactly one value wins) and returns the stored value:
  a running cluster keeps its partition count whatever a later start asks for.
- ``read_partition_count`` only reads (None for a cluster not created yet).
- A stored value that is not a positive integer raises ``ValueError``: the metadata
  is damaged and guessing would put data on partitions nobody reads.

Every role (write nodes, gateway, read nodes, rebalancer) must use these functions,
through ``MetadataStore.get_or_init_partition_count`` / ``read_partition_count``,
rather than ``settings.cluster.physical_partitions`` once the cluster exists.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from vpq.metadata.keys import Keys

# KEYS: count key ; ARGV: default
_GET_OR_INIT = """
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
"""


def partition_count_key(keys: Keys) -> str:
    """The Redis key holding the cluster's physical-partition count."""
    return f"{keys.prefix}:cluster:physical_partitions"


def _parse(raw: object) -> int:
    try:
        value = int(str(raw))
    except ValueError:
        raise ValueError(f"stored physical-partition count {raw!r} is not an integer") from None
    if value < 1:
        raise ValueError(f"stored physical-partition count {value} is not positive")
    return value


async def get_or_init_partition_count(client: aioredis.Redis, keys: Keys, default: int) -> int:
    """The cluster's partition count, storing ``default`` first when there is none."""
    if not isinstance(default, int) or isinstance(default, bool) or default < 1:
        raise ValueError(f"default partition count must be a positive integer, got {default!r}")
    raw = await client.eval(_GET_OR_INIT, 1, partition_count_key(keys), str(default))
    return _parse(raw)


async def read_partition_count(client: aioredis.Redis, keys: Keys) -> int | None:
    """The stored partition count, or None when the cluster has not been created yet."""
    raw = await client.get(partition_count_key(keys))
    return None if raw is None else _parse(raw)
