"""``POST /v1/cluster/partitions/{pp}/leader``: an operator's leader election.

Contract of :func:`elect_leader` (the gateway's ``ClusterBackend.elect_leader``):

- ``pp`` must be a physical partition of the cluster (else 404 ``partition_not_found``)
  and ``node`` a live write node's id (else 404 ``node_not_found``).
- :func:`refusal` decides, with no I/O, from the leadership record, the live holder of
  the lease ``pp:{pp}`` and the named node: 409 ``not_replicated`` (replication factor
  1: no record), ``not_a_replica``, ``partition_has_leader`` (a live node holds the
  lease: only a failed leader is replaced), ``replica_not_in_sync`` (the node is out of
  the in-sync set and ``unclean`` is false).
- An in-sync node is elected cleanly (nothing can be lost). An out-of-sync node with
  ``unclean`` is elected by force (``PartitionLeaders.elect(force=True)``): the epoch
  moves on, the in-sync set becomes ``[node]`` and the record keeps the truncation
  event: ``previous_leader``, ``previous_epoch``, ``high_watermark`` (the last one the
  old leader reported, -1 when none), ``new_leader_end`` (the node's copy, from its
  listing; 503 ``node_unreachable`` when it cannot be asked), ``lost_offsets`` =
  max(0, ``high_watermark`` - ``new_leader_end``): acknowledged offsets the cluster may
  have lost; later, each replica that truncates its log to the new history adds the
  offsets it cut under ``truncated`` (node id -> offsets).
- The record is changed by compare-and-swap on the epoch read: 409 ``election_conflict``
  when it moved meanwhile. The elected node takes the lease within a round of its
  ownership loop and leads at the next epoch (its own claim).
"""

from __future__ import annotations

import time
from typing import Any

from vpq.common.errors import Conflict, NotFound, Unavailable, VpqError
from vpq.metadata.leases import Lease, pp_resource
from vpq.metadata.partition_leaders import LeaderRecord
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.write_node_client import WriteNodeClient


def parse_partition(text: str, partition_count: int) -> int:
    """The partition named by a path segment; 404 when it is not one of the cluster's."""
    if text.isascii() and text.isdigit() and len(text) < 10 and int(text) < partition_count:
        return int(text)
    raise NotFound("partition_not_found", f"the cluster has no physical partition {text!r}", partition=text)


def refusal(rec: LeaderRecord | None, lease: Lease | None, node: int, node_id: str, unclean: bool) -> VpqError | None:
    """Why the election of ``node`` is refused (see module doc), None when it may proceed."""
    if rec is None:
        return Conflict("not_replicated", "the partition is not replicated (replication factor 1): its owner leads it")
    pp = rec.pp
    if node not in rec.replicas:
        return Conflict("not_a_replica", f"write node {node_id} holds no copy of partition {pp}", partition=pp)
    if lease is not None:
        return Conflict(
            "partition_has_leader",
            f"partition {pp} is led by write node {lease.node_id}; only a failed leader is replaced",
            partition=pp,
            leader=lease.node_id,
        )
    if node not in rec.isr and not unclean:
        return Conflict(
            "replica_not_in_sync",
            f"write node {node_id} is not in sync for partition {pp}; electing it may lose acknowledged "
            "messages: pass unclean true to accept that",
            partition=pp,
        )
    return None


def truncation_event(rec: LeaderRecord, names: dict[int, str], node_id: str, new_end: int, now_ms: int) -> dict[str, Any]:
    """The truncation event of an unclean election (see module doc; ``epoch`` is added by the CAS)."""
    return {
        "node": node_id,
        "previous_leader": names.get(rec.leader, f"w{rec.leader}") if rec.leader >= 0 else None,
        "previous_epoch": rec.epoch,
        "high_watermark": rec.hw,
        "new_leader_end": new_end,
        "lost_offsets": max(0, rec.hw - new_end),
        "time_ms": now_ms,
    }


def event_view(event: dict[str, Any] | None) -> dict[str, Any] | None:
    """The public form of a stored truncation event (``truncated`` always present)."""
    if event is None:
        return None
    truncated = event.get("truncated")
    return {**event, "truncated": dict(truncated) if isinstance(truncated, dict) else {}}


async def _copy_end(client: WriteNodeClient, address: str, pp: int, node_id: str) -> int:
    try:
        listing = await client.partitions(address)
    except VpqError as exc:
        raise Unavailable("node_unreachable", f"write node {node_id} cannot be asked for its copy: {exc.message}",
                          retry_after=1.0) from exc
    for row in listing.get("followers") or ():
        if isinstance(row, dict) and row.get("id") == pp and isinstance(row.get("end_offset"), int):
            return int(row["end_offset"])
    raise Unavailable("node_unreachable", f"write node {node_id} has no open copy of partition {pp} yet",
                      retry_after=1.0)


async def elect_leader(
    md: MetadataStore, client: WriteNodeClient, partition_count: int, pp_text: str, node_id: str, unclean: bool
) -> dict[str, Any]:
    """Elect ``node_id`` leader of partition ``pp_text`` (see module doc); the answer."""
    pp = parse_partition(pp_text, partition_count)
    nodes = await md.nodes.nodes("write")
    names = {n.meta["index"]: n.node_id for n in nodes if isinstance(n.meta.get("index"), int)}
    found = next((n for n in nodes if n.node_id == node_id and isinstance(n.meta.get("index"), int)), None)
    if found is None:
        raise NotFound("node_not_found", f"no live write node {node_id!r}", node=node_id)
    node = int(found.meta["index"])
    rec = await md.leaders.get(pp)
    lease = (await md.leases.owners([pp_resource(pp)]))[pp_resource(pp)]
    why = refusal(rec, lease, node, node_id, unclean)
    if why is not None:
        raise why
    assert rec is not None
    force = node not in rec.isr
    event = None
    if force:
        end = await _copy_end(client, found.address, pp, node_id)
        event = truncation_event(rec, names, node_id, end, int(time.time() * 1000))
    new = await md.leaders.elect(pp, node, node_id, rec.epoch, force=force, event=event)
    if new is None:
        raise Conflict("election_conflict", f"the leadership of partition {pp} changed meanwhile; try again", partition=pp)
    return {
        "id": pp,
        "leader": node_id,
        "leader_epoch": new.epoch,
        "in_sync_replicas": [names.get(i, f"w{i}") for i in new.isr],
        "unclean": force,
        "truncation": event_view(new.unclean) if force else None,
    }
