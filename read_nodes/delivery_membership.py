"""Membership of ``GroupDelivery``: live consumers, their contexts and vps, and the
routing that follows from them (see ``read_nodes.delivery``). A base class of
``GroupDelivery``, sharing its state; split off so that each file has one job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from vpq.isolation.context import IsolationContext
from vpq.read_nodes.delivery_items import INFLIGHT, Consumer, check_now
from vpq.read_nodes.delivery_types import ConsumerSpec, UnknownConsumer
from vpq.virtual_partitions.hashing import check_virtual_partitions


class DeliveryMembership:
    """The members of one group (``set_consumers``, ``join``, ``leave``, ...)."""

    def set_virtual_partitions(self, virtual_partitions: int) -> None:
        """Adopt a larger V after a split: vps are re-projected from the stored key
        hashes (per-key order is unaffected). ValueError when V would shrink."""
        check_virtual_partitions(virtual_partitions)
        if virtual_partitions < self._v:
            raise ValueError(f"virtual_partitions may only grow ({self._v} -> {virtual_partitions})")
        if virtual_partitions == self._v:
            return
        self._v = virtual_partitions
        self._mask = virtual_partitions - 1
        for ctx, prio, seq, msg in self._ready.drain():
            self._ready.push(ctx, msg.key_hash & self._mask, prio, seq, msg)

    def _consumer(self, consumer_id: str) -> Consumer:
        c = self._consumers.get(consumer_id)
        if c is None:
            raise UnknownConsumer(consumer_id)
        return c

    def _check_vps(self, consumer_id: str, vps: frozenset[int], virtual_partitions: int) -> None:
        if not isinstance(consumer_id, str) or not consumer_id:
            raise ValueError(f"consumer id must be a non-empty string, got {consumer_id!r}")
        bad = [vp for vp in vps if vp >= virtual_partitions]
        if bad:
            raise ValueError(
                f"consumer {consumer_id!r}: vp {min(bad)} out of range for {virtual_partitions} virtual partitions"
            )

    def _reroute(self) -> None:
        self._routes.rebuild((c.ctx for c in self._consumers.values()), self._ctx_count)
        members: dict[IsolationContext, int] = {}
        for c in self._consumers.values():
            members[c.ctx] = members.get(c.ctx, 0) + 1
        self._members_by_ctx = members
        route_of = self._routes.route_of
        self._unroutable = frozenset(ctx for ctx in self._ctx_count if route_of(ctx) is None)
        held = 0
        if self._unroutable:
            for msg in self._msgs.values():
                if msg.state != INFLIGHT and msg.ctx in self._unroutable:
                    held += 1
        self._unroutable_held = held

    def _release_all(self, consumer_id: str, now_ms: int) -> int:
        c = self._consumers[consumer_id]
        n = len(c.inflight)
        msgs = sorted(c.inflight.values(), key=lambda m: m.seq)
        for msg in msgs:
            if msg.state == INFLIGHT and msg.holder == consumer_id:  # an earlier one's run may have taken it back
                self._fail(msg, "left", 0, now_ms)
        return n

    def set_consumers(
        self, consumers: Mapping[str, ConsumerSpec], now_ms: int, virtual_partitions: int | None = None
    ) -> list[str]:
        """Make ``consumers`` the live members, with their contexts and owned vps
        (typically straight from a new assignment, whose V is ``virtual_partitions``).

        Members not listed leave (their in-flight messages are redelivered to others
        at once); a member whose context changed leaves and rejoins. Returns the ids
        that left. Owned vps only steer work: correctness (order, at-least-once) does
        not depend on the assignment being complete or exclusive.
        """
        check_now(now_ms)
        new_v = self._v if virtual_partitions is None else virtual_partitions
        check_virtual_partitions(new_v)
        if new_v < self._v:
            raise ValueError(f"virtual_partitions may only grow ({self._v} -> {new_v})")
        for cid, spec in consumers.items():
            if not isinstance(spec, ConsumerSpec):
                raise ValueError(f"consumer {cid!r}: expected a ConsumerSpec, got {type(spec).__name__}")
            self._check_vps(cid, spec.vps, new_v)
        self.set_virtual_partitions(new_v)
        self.expire(now_ms)
        left: list[str] = []
        for cid, c in list(self._consumers.items()):
            spec = consumers.get(cid)
            if spec is None or spec.ctx != c.ctx:
                self._release_all(cid, now_ms)
                del self._consumers[cid]
                if spec is None:
                    left.append(cid)
        for cid, spec in consumers.items():
            c = self._consumers.get(cid)
            if c is None:
                self._consumers[cid] = Consumer(spec.ctx, spec.vps, now_ms)
            else:
                c.vps = spec.vps
        self._reroute()
        return left

    def join(self, consumer_id: str, ctx: IsolationContext, vps: Iterable[int], now_ms: int) -> None:
        """Add (or update) one member; counts as its heartbeat. Other members keep
        their vps: when the assignment moves vps, follow with ``set_consumers`` (or
        use it directly) with the whole new assignment."""
        specs = {cid: ConsumerSpec(c.ctx, c.vps) for cid, c in self._consumers.items()}
        specs[consumer_id] = ConsumerSpec(ctx, vps)
        self.set_consumers(specs, now_ms)
        c = self._consumers[consumer_id]
        c.last_seen = max(c.last_seen, now_ms)

    def set_vps(self, consumer_id: str, vps: Iterable[int]) -> None:
        """Change the vps one member owns (UnknownConsumer when not a member)."""
        c = self._consumer(consumer_id)
        frozen = ConsumerSpec(c.ctx, vps).vps
        self._check_vps(consumer_id, frozen, self._v)
        c.vps = frozen

    def leave(self, consumer_id: str, now_ms: int) -> int:
        """Remove a member; its unacked messages become deliverable to others at once
        (or are dead-lettered when they reached ``max_deliveries``). Returns how many
        it held. UnknownConsumer when not a member."""
        check_now(now_ms)
        self._consumer(consumer_id)
        self.expire(now_ms)
        released = self._release_all(consumer_id, now_ms)
        del self._consumers[consumer_id]
        self._reroute()
        return released

    def idle_consumers(self, now_ms: int, session_timeout_ms: int) -> list[str]:
        """Members that have not polled (nor joined) for ``session_timeout_ms``."""
        return sorted(cid for cid, c in self._consumers.items() if now_ms - c.last_seen >= session_timeout_ms)

    def is_member(self, consumer_id: str) -> bool:
        return consumer_id in self._consumers
