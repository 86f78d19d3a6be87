"""Sending a consumer-group call to the read node that serves the group.

``GroupCaller.call(queue, group, fn)`` runs ``fn(address)`` against the group's read node
(``ReadNodeDirectory.node_for``) and handles the two ways that can go wrong:

- 409 ``not_owner`` with detail ``owner``: another live read node holds the group's lease;
  the call is forwarded there and the owner remembered for the group. An owner that is not
  live (its lease has not expired yet) or a node naming itself gives ``Unavailable``
  (``group_moving``, retryable): the lease expires within the lease TTL and the next call
  re-homes the group.
- ``node_unreachable``: the node is left out of the rendezvous choice for a while and the
  call goes to the next node (which takes the lease once the old one has expired).

At most ``max_hops`` nodes are tried per call; then the last error is raised as a
retryable ``Unavailable``. Every other error of the read node passes through unchanged.
A call retried after a lost answer may have had its effect once already (a poll's
messages then come back after their visibility timeout: at-least-once).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from vpq.common.errors import Conflict, Unavailable
from vpq.node_rpc.call import NODE_UNREACHABLE
from vpq.node_rpc.node_directory import NodeRef, ReadNodeDirectory

T = TypeVar("T")

NOT_OWNER = "not_owner"
RETRY_AFTER_S = 1.0


class GroupCaller:
    def __init__(self, directory: ReadNodeDirectory, *, max_hops: int = 3) -> None:
        self._directory = directory
        self._max_hops = max_hops
        self.forwards = 0
        self.failovers = 0

    async def call(self, queue: str, group: str, fn: Callable[[str], Awaitable[T]]) -> T:
        node: NodeRef = await self._directory.node_for(queue, group)
        last: Exception | None = None
        for _ in range(self._max_hops):
            try:
                return await fn(node.address)
            except Conflict as exc:
                if exc.code != NOT_OWNER:
                    raise
                last = exc
                owner = exc.details.get("owner")
                if not isinstance(owner, str) or owner == node.node_id:
                    self._directory.forget(queue, group)
                    break
                ref = await self._directory.learn_owner(queue, group, owner)
                if ref is None:
                    break
                self.forwards += 1
                node = ref
            except Unavailable as exc:
                if exc.code != NODE_UNREACHABLE:
                    raise
                last = exc
                self.failovers += 1
                self._directory.node_down(node.node_id)
                node = await self._directory.node_for(queue, group)
        raise Unavailable(
            "group_moving",
            f"group {group!r} of queue {queue!r} is moving between read nodes; retry shortly"
            + (f" ({last})" if last is not None else ""),
            retry_after=RETRY_AFTER_S,
        ) from last
