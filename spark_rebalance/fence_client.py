"""Client of the write nodes' fence endpoint (``docs/internals.md``, "Remap cut-over").

``POST /internal/v1/partitions/{pp}/fence`` with ``{"epoch": E, "timeout_ms": T}``
answers ``{"partition", "epoch", "end_offset"}`` once the node enforces the fence
published at epoch ``E`` and every append it admitted before is durable:
``end_offset`` bounds every record of a vp fenced at ``E`` on that partition.

``HttpFenceClient.fence(pp, epoch, timeout_s)`` finds the partition's owner (the
holder of the lease ``pp:{n}``, at the address it registered under role ``write``)
and makes ONE call; it raises ``common.errors`` exceptions (``Unavailable``
``partition_unowned`` when nobody owns the partition, ``node_unreachable``, or the
node's own error). Retrying is the caller's business (``publisher``).
"""

from __future__ import annotations

import aiohttp

from vpq.common.errors import InternalError, Unavailable
from vpq.metadata.leases import LeaseManager, NodeRegistry, pp_resource
from vpq.node_rpc.call import BAD_NODE_ANSWER, call_node

WRITE_ROLE = "write"
FENCE_PATH = "/internal/v1/partitions/{pp}/fence"


class HttpFenceClient:
    """See the module docstring. The caller owns ``session``."""

    def __init__(self, session: aiohttp.ClientSession, leases: LeaseManager, nodes: NodeRegistry) -> None:
        self._session = session
        self._leases = leases
        self._nodes = nodes

    async def owner_address(self, pp: int) -> str:
        """The registered address of ``pp``'s owner; ``Unavailable`` when there is none."""
        lease = await self._leases.owner(pp_resource(pp))
        if lease is not None:
            for n in await self._nodes.nodes(WRITE_ROLE):
                if n.node_id == lease.node_id:
                    return n.address
        raise Unavailable(
            "partition_unowned", f"no live write node owns physical partition {pp}", retry_after=1.0, partition=pp
        )

    async def fence(self, pp: int, epoch: int, timeout_s: float) -> int:
        """The fenced end offset of ``pp`` for map epoch ``epoch`` (one attempt)."""
        address = await self.owner_address(pp)
        answer = await call_node(
            self._session,
            "POST",
            address,
            FENCE_PATH.format(pp=int(pp)),
            role=WRITE_ROLE,
            timeout_s=timeout_s + 2.0,
            json_body={"epoch": int(epoch), "timeout_ms": int(timeout_s * 1000)},
        )
        obj = answer.json()
        end = obj.get("end_offset") if isinstance(obj, dict) else None
        if not isinstance(end, int) or isinstance(end, bool) or end < 0:
            raise InternalError(BAD_NODE_ANSWER, f"write node {address} answered a fence without an end_offset")
        return end
