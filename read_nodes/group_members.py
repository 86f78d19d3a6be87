"""Membership of one hosted group: Redis sessions, local liveness and vp assignment.

Authority: the node holding the group's lease sees every join, poll, ack and
leave of the group, so it decides liveness itself, from the polls it serves: a
member that has not polled (nor joined) for ``session_timeout_ms`` and has no
poll waiting is removed as if it had left. Redis (``metadata.groups``) keeps
the membership for a node that takes the group over: joins and leaves are
written through at once; sessions are refreshed at most every
``heartbeat_interval_ms`` per member (and during long polls), so a member the
node considers live never expires in Redis. A takeover node first drops the
members whose Redis session has expired, then adopts the rest with a fresh
local session.

Joins arriving together (a fleet of consumers starting at once) are batched: the
first starts a writer task, the joins that come while it writes wait for its next
batch; each batch is one Redis round trip (``GroupStore.join_many``) and one
reassignment, so N concurrent joins cost a few round trips and reassignments, not N
of each. A join still answers only once it is written and applied.

Assignment: ``virtual_partitions.assignment.assign`` over the live members
(sticky, per isolation context), applied with ``GroupDelivery.set_consumers``.
When a context has more members than the queue has vps, V grows (automatic
split) at once for the delivery state; ``split_target`` then tells the host to
grow the queue itself (registry, placement map, lineage) through the gateway's
put-queue path.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

from vpq.isolation.context import IsolationContext
from vpq.metadata.store import MetadataStore
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import ConsumerSpec
from vpq.virtual_partitions.assignment import AssignmentResult, assign

log = logging.getLogger(__name__)


def new_consumer_id() -> str:
    return f"c-{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True, slots=True)
class _QueuedJoin:
    consumer_id: str
    ctx: IsolationContext
    start: str
    queue_vps: int
    now_ms: int
    done: asyncio.Future[None]


class GroupMembers:
    def __init__(
        self,
        md: MetadataStore,
        queue: str,
        group: str,
        delivery: GroupDelivery,
        *,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_vps: int,
    ) -> None:
        self._md = md
        self.queue = queue
        self.group = group
        self._delivery = delivery
        self.session_timeout_ms = session_timeout_ms
        self._hb_interval_s = heartbeat_interval_ms / 1000.0
        self._max_vps = max_vps
        self.members: dict[str, IsolationContext] = {}
        self._hb: dict[str, float] = {}
        self._polling: dict[str, int] = {}
        self.assignment: AssignmentResult[IsolationContext] | None = None
        self.split_target: int | None = None
        self._queued_joins: list[_QueuedJoin] = []
        self._join_writer: asyncio.Task[None] | None = None

    # ------------------------------------------------------------ takeover
    async def load(self, queue_vps: int, now_ms: int) -> None:
        """Adopt the members Redis still has live (after expiring the others)."""
        await self._md.groups.expire(self.queue, self.group)
        for m in await self._md.groups.members(self.queue, self.group):
            self.members[m.consumer_id] = IsolationContext(m.env, m.set, m.lane)
            self._hb[m.consumer_id] = time.monotonic()
        self.reassign(queue_vps, now_ms)

    # ------------------------------------------------------------- changes
    async def join(self, consumer_id: str, ctx: IsolationContext, start: str, queue_vps: int, now_ms: int) -> None:
        """Write the join through to Redis, then make the consumer a member (a heartbeat
        when it is one already). Concurrent joins are batched (see the module docstring):
        this returns once this join is written and applied, or raises what its batch's
        write raised (then it is not applied here)."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queued_joins.append(_QueuedJoin(consumer_id, ctx, start, queue_vps, now_ms, done))
        if self._join_writer is None:
            self._join_writer = asyncio.get_running_loop().create_task(
                self._write_joins(), name=f"vpq-joins-{self.queue}-{self.group}"
            )
        await done

    async def _write_joins(self) -> None:
        """Write the queued joins, a batch per round trip, until none is left; apply each
        batch with one reassignment. Never cancelled by a caller: every queued join's
        future gets its result or error."""
        try:
            while self._queued_joins:
                batch, self._queued_joins = self._queued_joins, []
                try:
                    await self._md.groups.join_many(
                        self.queue,
                        self.group,
                        [(j.consumer_id, (j.ctx.env, j.ctx.set, j.ctx.lane), j.start) for j in batch],
                        self.session_timeout_ms,
                    )
                    self._apply_joins(batch)
                except asyncio.CancelledError:
                    for j in batch:
                        j.done.cancel()
                    raise
                except Exception as exc:
                    for j in batch:
                        if not j.done.done():
                            j.done.set_exception(exc)
        finally:
            self._join_writer = None
            for j in self._queued_joins:  # only when cancelled (the loop is closing)
                if not j.done.done():
                    j.done.cancel()
            self._queued_joins = []

    def _apply_joins(self, batch: list[_QueuedJoin]) -> None:
        now = time.monotonic()
        changed = False
        for j in batch:
            self._hb[j.consumer_id] = now
            if self.members.get(j.consumer_id) != j.ctx:
                self.members[j.consumer_id] = j.ctx
                changed = True
        now_ms = max(j.now_ms for j in batch)
        if changed:
            self.reassign(max(j.queue_vps for j in batch), now_ms)
        for j in batch:
            if j.consumer_id in self.members:
                self._delivery.poll(j.consumer_id, 0, now_ms)  # a join is a heartbeat
            if not j.done.done():
                j.done.set_result(None)

    async def remove(self, consumer_id: str, queue_vps: int, now_ms: int) -> bool:
        """Remove a member (leave or session timeout); False when it was not one. The
        member leaves the metadata store first, then its messages go to the others:
        whoever receives them sees a membership that no longer lists it. When the store
        cannot be reached the member stays (the error propagates; a later tick retries)."""
        ctx = self.members.pop(consumer_id, None)
        if ctx is None:
            return False
        try:
            await self._md.groups.leave(self.queue, self.group, consumer_id)
        except BaseException:
            self.members.setdefault(consumer_id, ctx)
            raise
        self._hb.pop(consumer_id, None)
        if self._delivery.is_member(consumer_id):
            self._delivery.leave(consumer_id, now_ms)
        self.reassign(queue_vps, now_ms)
        return True

    def reassign(self, queue_vps: int, now_ms: int) -> None:
        v = max(queue_vps, self._delivery.virtual_partitions)
        res = assign(self.members, v, previous=self.assignment, max_vps=self._max_vps)
        specs = {cid: ConsumerSpec(ctx, res.vps_of(cid)) for cid, ctx in self.members.items()}
        self._delivery.set_consumers(specs, now_ms, virtual_partitions=res.virtual_partitions)
        self.assignment = res
        if res.virtual_partitions > queue_vps:
            self.split_target = max(self.split_target or 0, res.virtual_partitions)

    # ------------------------------------------------------------- liveness
    def poll_started(self, consumer_id: str) -> None:
        self._polling[consumer_id] = self._polling.get(consumer_id, 0) + 1

    def poll_ended(self, consumer_id: str) -> None:
        n = self._polling.get(consumer_id, 0) - 1
        if n > 0:
            self._polling[consumer_id] = n
        else:
            self._polling.pop(consumer_id, None)

    async def heartbeat(self, consumer_id: str, force: bool = False) -> None:
        """Refresh the member's Redis session when due (re-adding it there if Redis
        expired it meanwhile: this node, which sees its polls, says it is live)."""
        now = time.monotonic()
        if not force and now - self._hb.get(consumer_id, 0.0) < self._hb_interval_s:
            return
        self._hb[consumer_id] = now
        gen = await self._md.groups.heartbeat(self.queue, self.group, consumer_id)
        ctx = self.members.get(consumer_id)
        if gen is None and ctx is not None:
            log.info("%s/%s: consumer %s had expired in Redis; re-registering it", self.queue, self.group, consumer_id)
            await self._md.groups.join(
                self.queue, self.group, consumer_id, (ctx.env, ctx.set, ctx.lane), self.session_timeout_ms
            )

    def idle(self, now_ms: int) -> list[str]:
        """Members past their session timeout with no poll waiting."""
        return [
            cid for cid in self._delivery.idle_consumers(now_ms, self.session_timeout_ms) if cid not in self._polling
        ]

    async def refresh_polling(self, now_ms: int) -> None:
        """Keep members that wait in a long poll alive (locally and in Redis)."""
        for cid in list(self._polling):
            if cid in self.members:
                self._delivery.poll(cid, 0, now_ms)
                await self.heartbeat(cid)
