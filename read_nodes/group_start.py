"""Where a new consumer group starts reading, per physical partition.

Decided once, when the group is created, and stored with
``metadata.groups.GroupStore.set_start_offsets`` (first writer wins) so that a
node taking the group over starts from the same place:

- ``earliest``: in each pp of the queue's lineage, the lowest ``from_offset`` of
  its ranges there (the start of the queue's history in that pp; the write
  node's log start applies when retention removed older data);
- ``latest``: the current durable end offset of every pp in the queue's lineage
  and placement, as the owning write nodes report it
  (``GET /internal/v1/partitions``).

A pp that the queue reaches only later (a remap) has no stored start; readers
use the start of its lineage range there (see ``GroupHost``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from vpq.common.errors import Unavailable, VpqError
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.read_nodes.lineage_order import LineageOrder
from vpq.read_nodes.tailer import PartitionLocator

StartPosition = Literal["earliest", "latest"]


async def end_offsets(pps: Iterable[int], locator: PartitionLocator, client: WriteNodeClient) -> dict[int, int]:
    """The durable end offset of each pp, from its owning write node."""
    wanted = set(pps)
    by_address: dict[str, set[int]] = {}
    for pp in wanted:
        by_address.setdefault((await locator.owner(pp)).address, set()).add(pp)
    out: dict[int, int] = {}
    for address, owned in by_address.items():
        try:
            listing = await client.partitions(address)
        except VpqError:
            for pp in owned:
                locator.invalidate(pp)
            raise
        for p in listing["partitions"]:
            if p.get("id") in owned and isinstance(p.get("end_offset"), int):
                out[int(p["id"])] = int(p["end_offset"])
    missing = sorted(wanted - set(out))
    if missing:
        for pp in missing:
            locator.invalidate(pp)
        raise Unavailable("partition_unowned", f"no write node reports physical partitions {missing}", retry_after=1)
    return out


async def start_offsets(
    start: StartPosition,
    lineage: LineageOrder,
    placement: Iterable[int],
    locator: PartitionLocator,
    client: WriteNodeClient,
) -> dict[int, int]:
    """The per-pp start offsets of a new group (see the module docstring)."""
    first = lineage.first_offsets()
    pps = set(first) | set(placement)
    if start == "earliest":
        return {pp: first.get(pp, 0) for pp in pps}
    if not pps:
        return {}
    return await end_offsets(pps, locator, client)
