"""The cluster's shape and its write-node slots, fixed in Redis by the first write node.

Contract:

- The shape (physical partitions K, replication factor R, write-node count N) lives in
  the hash ``{prefix}:cluster:shape`` (fields ``physical_partitions``,
  ``replication_factor``, ``write_nodes``). ``get_or_create_shape(client, keys, want)``
  stores ``want`` when the hash is missing and returns the stored shape, in one Lua
  script: of any number of concurrent first starters exactly one shape wins. A cluster
  whose partition count was stored before (``metadata.partition_count``, e.g. by
  ``vpq up``) keeps that count: the shape created for it takes K from there, and the
  count key is written with the shape's K when it was missing, so every role reading
  ``read_partition_count`` agrees with the shape.
- ``read_shape`` only reads (None before a write node created the shape).
- ``mismatches(stored, explicit)`` names every value a starter asked for explicitly that
  differs from the stored shape (pure; the caller refuses to start on any).
- Write-node slots: the hash ``{prefix}:cluster:write_slots`` maps node id -> index in
  ``[0, N)``. ``claim_write_slot(client, keys, node_id, n, index)`` gives a node id the
  slot it already has (a restart keeps its index), else the requested ``index`` when no
  other node id holds it, else (no ``index``) the lowest free slot, all in one script;
  ``SlotError`` says why when none can be given. Slots are never released: an index is
  where a node's home partitions and replicas are placed, so it stays with its node id.
- A stored value that is not a positive integer raises ``ValueError`` (damaged metadata).
"""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis

from vpq.metadata.keys import Keys
from vpq.metadata.names import check_id
from vpq.metadata.partition_count import partition_count_key

FIELDS = ("physical_partitions", "replication_factor", "write_nodes")

# KEYS: shape, count ; ARGV: K, R, N
_GET_OR_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  local k = redis.call('GET', KEYS[2])
  if not k then
    k = ARGV[1]
    redis.call('SET', KEYS[2], k)
  end
  redis.call('HSET', KEYS[1], 'physical_partitions', k, 'replication_factor', ARGV[2], 'write_nodes', ARGV[3])
end
return redis.call('HMGET', KEYS[1], 'physical_partitions', 'replication_factor', 'write_nodes')
"""

# KEYS: slots ; ARGV: node id, N, requested index (-1: any)
# returns {index} or {-1} (all taken) or {-2, held index} or {-3, other node id}
_CLAIM = """
local mine = redis.call('HGET', KEYS[1], ARGV[1])
local want = tonumber(ARGV[3])
if mine then
  if want >= 0 and tonumber(mine) ~= want then return {-2, mine} end
  return {tonumber(mine)}
end
local flat = redis.call('HGETALL', KEYS[1])
local taken = {}
for i = 1, #flat, 2 do taken[tonumber(flat[i + 1])] = flat[i] end
if want >= 0 then
  if taken[want] then return {-3, taken[want]} end
  redis.call('HSET', KEYS[1], ARGV[1], want)
  return {want}
end
for i = 0, tonumber(ARGV[2]) - 1 do
  if not taken[i] then
    redis.call('HSET', KEYS[1], ARGV[1], i)
    return {i}
  end
end
return {-1}
"""


@dataclass(frozen=True)
class ClusterShape:
    physical_partitions: int
    replication_factor: int
    write_nodes: int

    def __post_init__(self) -> None:
        for name in FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


class SlotError(ValueError):
    """No write-node slot can be given to this node id (the message says why)."""


def shape_key(keys: Keys) -> str:
    return f"{keys.prefix}:cluster:shape"


def slots_key(keys: Keys) -> str:
    return f"{keys.prefix}:cluster:write_slots"


def _parse(raw: list[object]) -> ClusterShape:
    values: list[int] = []
    for name, item in zip(FIELDS, raw):
        try:
            value = int(str(item))
        except ValueError:
            raise ValueError(f"stored cluster {name} {item!r} is not an integer") from None
        if value < 1:
            raise ValueError(f"stored cluster {name} {value} is not positive")
        values.append(value)
    return ClusterShape(*values)


def mismatches(stored: ClusterShape, explicit: dict[str, int]) -> list[str]:
    """``"<name> <asked> (the cluster has <stored>)"`` for each explicit value that differs."""
    out = []
    for name in FIELDS:
        if name in explicit and explicit[name] != getattr(stored, name):
            out.append(f"{name} {explicit[name]} (the cluster has {getattr(stored, name)})")
    return out


async def get_or_create_shape(client: aioredis.Redis, keys: Keys, want: ClusterShape) -> ClusterShape:
    """The stored shape, ``want`` stored first when the cluster has none (module doc)."""
    raw = await client.eval(
        _GET_OR_CREATE, 2, shape_key(keys), partition_count_key(keys),
        str(want.physical_partitions), str(want.replication_factor), str(want.write_nodes),
    )  # fmt: skip
    return _parse(list(raw))


async def read_shape(client: aioredis.Redis, keys: Keys) -> ClusterShape | None:
    """The stored shape, or None before a write node created it."""
    raw = await client.hmget(shape_key(keys), list(FIELDS))
    if all(item is None for item in raw):
        return None
    return _parse(list(raw))


async def claim_write_slot(
    client: aioredis.Redis, keys: Keys, node_id: str, write_nodes: int, index: int | None = None
) -> int:
    """This node id's write-node index (module doc); ``SlotError`` when none can be given."""
    check_id("node id", node_id)
    if index is not None and not 0 <= index < write_nodes:
        raise SlotError(f"index {index} is outside [0, {write_nodes}) for a cluster of {write_nodes} write nodes")
    reply = await client.eval(_CLAIM, 1, slots_key(keys), node_id, str(write_nodes), str(-1 if index is None else index))
    code = int(reply[0])
    if code >= 0:
        if code >= write_nodes:
            raise SlotError(
                f"write node {node_id} holds index {code}, outside the cluster's {write_nodes} write nodes"
            )
        return code
    if code == -2:
        raise SlotError(f"write node {node_id} already holds index {_text(reply[1])}, not {index}")
    if code == -3:
        raise SlotError(f"index {index} already belongs to write node {_text(reply[1])}")
    raise SlotError(
        f"all {write_nodes} write-node slots are taken by other node ids (restart one of them with its own "
        "--node-id, or give this node the --node-id of the one it replaces)"
    )


def _text(item: object) -> str:
    return item.decode() if isinstance(item, bytes) else str(item)
