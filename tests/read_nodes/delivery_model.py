"""A reference model of one group's delivery state, driving a real ``GroupDelivery``
and checking every answer against the model.

Checked on every step: per-key order with runs (a message is delivered only
when every earlier message with the same key and context is acked,
dead-lettered, or delivered just before it in the same poll: one poll may carry a
run of a key, and a failed message of a run takes the later ones of its run
still in flight back with it), isolation (the receiver's context is ``route`` of the message's
context over the live contexts, and it owns the message's vp), delivery counts,
visibility deadlines, redeliveries before first deliveries within a poll, exact
ack/nack counts, exact dead letters, no redelivery of anything acked (also after
a failover through ``ack_state``/``restore``), and lag. ``drain`` then checks
at-least-once: with a consumer for every env, everything ends acked or
dead-lettered.

Message attributes: a message may carry a ``priority`` (0-9): the runs a poll
starts come by (higher priority, redelivery, ingestion order), and no ready run
head the consumer could see is left behind for one of lower rank; and it may be
*delayed* (``defer``): it is held as (due, position) only, outstanding for the
ack state, and ``take_due`` hands it back, by due time, once due; the harness
then ingests it, so it joins its key at that point (as the read node's
ingestor does: before ingesting a record read from the log it takes what came
due by that record's timestamp). A failover re-reads the log the same way.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import SimpleNamespace

from vpq.codec.message_id import encode_message_id
from vpq.isolation.context import IsolationContext
from vpq.isolation.routing import route
from vpq.read_nodes.ack_tracker import PartitionAckState
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_items import INFLIGHT as HELD_IN_FLIGHT
from vpq.read_nodes.delivery_types import ConsumerSpec, DeliveryConfig, DeliveryEntry
from vpq.virtual_partitions.assignment import AssignmentResult, assign
from vpq.virtual_partitions.hashing import key_hash

CONTEXTS = [
    IsolationContext("prod", "", ""),
    IsolationContext("prod", "", "a"),
    IsolationContext("prod", "eu", ""),
    IsolationContext("prod", "eu", "a"),
    IsolationContext("test", "", ""),
    IsolationContext("test", "", "b"),
]
KEYS: list[bytes | None] = [b"k0", b"k1", b"k2", b"k3", b"k4", None]

PENDING, INFLIGHT, DELAYED, ACKED, DEAD_UNCONFIRMED, DEAD = "pending", "inflight", "delayed", "acked", "dead?", "dead"
DEFERRED = "deferred"  # delayed by its deliver_at attribute: held as (due, position) only
DONE = (ACKED, DEAD_UNCONFIRMED, DEAD)


@dataclass
class MMsg:
    pp: int
    offset: int
    key: bytes | None
    ctx: IsolationContext
    khash: int
    status: str = PENDING
    holder: str | None = None
    count: int = 0
    due: int = 0
    delivered_ever: int = 0
    taken: bool = False  # dead letter handed out by take_dead_letters
    idx: int = 0  # ingestion order
    chain: list[MMsg] = field(default_factory=list, repr=False)
    priority: int = 0
    ts: int = 0  # record timestamp (the harness's clock)
    deliver_at: int | None = None

    @property
    def mid(self) -> str:
        return encode_message_id(self.pp, self.offset)

    def entry(self) -> DeliveryEntry:
        return DeliveryEntry(self.pp, self.offset, self.khash, self.key, self.ctx, self.ts, priority=self.priority)

    @property
    def rank(self) -> tuple[int, int]:
        """Lower first: higher priority, then redeliveries."""
        return (-self.priority, 0 if self.count else 1)


def check_invariants(gd: GroupDelivery) -> None:
    """AssertionError when a count kept incrementally disagrees with a recount
    (for tests: O(n))."""
    chains = gd._chains.values()
    assert all(c.counted == (len(c.pending) if c.run else 0) for c in chains), "a chain's blocked count"
    assert gd._blocked == sum(c.counted for c in chains), (gd._blocked, sum(c.counted for c in chains))
    assert gd._inflight == sum(len(c.inflight) for c in gd._consumers.values()), "in flight"
    assert gd._inflight == sum(1 for m in gd._msgs.values() if m.state == HELD_IN_FLIGHT), "in flight states"
    held = sum(1 for m in gd._msgs.values() if m.state != HELD_IN_FLIGHT and m.entry.ctx in gd._unroutable)
    assert gd._unroutable_held == held, (gd._unroutable_held, held)
    for c in chains:
        assert all(m.state == HELD_IN_FLIGHT for m in c.run), "a run holds only messages in flight"
        assert all(m.state != HELD_IN_FLIGHT for m in c.pending), "pending holds no message in flight"
        assert c.pending or c.run, "an empty chain is dropped"
    for pk, n in gd._parked.items():
        assert n == sum(len(c.pending) + len(c.run) for c in chains if c.parked_key == pk), ("parked held", pk)


class Harness:
    def __init__(
        self, ordering: str = "key", max_deliveries: int = 3, vis: int = 100, v: int = 4, form: str = "pair",
        steal: bool = False,
    ) -> None:
        # how ack state is persisted across failovers: "pair", or "compact" (then, as a read
        # node runs it, with no pair-form window: the tracker keeps the compact form only)
        self.form = form
        self.cfg = DeliveryConfig(ordering=ordering, max_deliveries=max_deliveries, visibility_timeout_ms=vis,
                                  max_unacked=10_000, virtual_partitions=v, steal_when_idle=steal,
                                  max_acked_above=9_000 if form == "pair" else None)
        self.watermarks: dict[int, int] = {}
        self.gd = GroupDelivery(self.cfg)
        self.now = 0
        self.msgs: list[MMsg] = []
        self.by_id: dict[str, MMsg] = {}
        self.chains: dict[tuple[bytes, IsolationContext], list[MMsg]] = {}
        self.next_off = {0: 0, 1: 0}
        self.spread = 7
        self.consumers: dict[str, IsolationContext] = {}
        self.assignment: AssignmentResult | None = None
        self.v = v
        self.n_cids = 0
        self.deliveries = 0
        self.seq = 0
        self.delays = False  # ingest delayed messages and priorities too

    # ---------------------------------------------------------------- helpers
    def _specs(self) -> dict[str, ConsumerSpec]:
        assert self.assignment is not None or not self.consumers
        return {cid: ConsumerSpec(ctx, self.assignment.vps_of(cid) if self.assignment else ()) for cid, ctx in self.consumers.items()}

    def _reassign(self) -> None:
        self.assignment = assign(self.consumers, self.v, self.assignment, max_vps=16)
        self.v = self.assignment.virtual_partitions
        self.gd.set_consumers(self._specs(), self.now, self.v)

    def _fail(self, m: MMsg, delay: int = 0) -> None:
        """``m`` failed: the later messages of its run still in flight go back too
        (pending, not counted as failed); ``m`` is dead-lettered, delayed or pending."""
        if self.cfg.ordering == "key" and m.key is not None:
            chain = self.chains[(m.key, m.ctx)]
            for later in chain[chain.index(m) + 1:]:
                if later.status == INFLIGHT:  # withdrawn: that delivery does not count
                    later.status, later.holder, later.count = PENDING, None, later.count - 1
        m.holder = None
        if m.count >= self.cfg.max_deliveries:
            m.status = DEAD_UNCONFIRMED
        elif delay > 0:
            m.status, m.due = DELAYED, self.now + delay
        else:
            m.status = PENDING

    def check_dead_letters(self, expect_none: bool = False) -> None:
        got = {d.message_id: d for d in self.gd.take_dead_letters()}
        want = {m.mid for m in self.msgs if m.status == DEAD_UNCONFIRMED and not m.taken}
        assert set(got) == want, (sorted(got), sorted(want))
        if expect_none:
            assert not got
        for mid, d in got.items():
            m = self.by_id[mid]
            assert d.delivery_count == m.count == self.cfg.max_deliveries
            assert d.entry == m.entry()
            m.taken = True

    def confirm_dead(self, fraction: float, rng: random.Random) -> None:
        ids = [m.mid for m in self.msgs if m.status == DEAD_UNCONFIRMED and m.taken]
        chosen = [i for i in ids if rng.random() < fraction]
        assert self.gd.confirm_dead_letters(chosen) == len(chosen)
        for i in chosen:
            self.by_id[i].status = DEAD

    def check_watermarks(self) -> None:
        """The persisted state never regresses, and it is exact: below the watermark
        everything is done; at or above it, the listed offsets are exactly the done ones."""
        states = self.gd.ack_state() if self.form == "pair" else {
            pp: (s.low_watermark, None) for pp, s in self.gd.compact_ack_state().items()
        }
        for pp, (lw, above) in states.items():
            assert lw >= self.watermarks.get(pp, 0), (pp, lw, self.watermarks)
            self.watermarks[pp] = lw
            mine = [m for m in self.msgs if m.pp == pp]
            assert all(m.status in (ACKED, DEAD) for m in mine if m.offset < lw)
            if above is not None:
                assert above == sorted(m.offset for m in mine if m.offset >= lw and m.status in (ACKED, DEAD))

    def check_lag(self) -> None:
        check_invariants(self.gd)
        self.check_watermarks()
        outstanding = [m for m in self.msgs if m.status not in DONE and m.status != DEFERRED]
        assert self.gd.lag().total == len(outstanding)
        assert self.gd.delayed() == sum(1 for m in self.msgs if m.status == DEFERRED)
        by_ctx: dict[IsolationContext, int] = {}
        for cid, ctx in self.consumers.items():
            held = sum(1 for m in outstanding if m.status == INFLIGHT and m.holder == cid)
            assert self.gd.inflight_count(cid) == held
            if held:
                by_ctx[ctx] = by_ctx.get(ctx, 0) + held
        assert self.gd.in_flight_by_context() == by_ctx  # the counts the fair share reads

    # ------------------------------------------------------------- operations
    def ingest(self, rng: random.Random, n: int) -> None:
        for _ in range(n):
            pp = rng.randrange(2)
            off = self.next_off[pp] + rng.randrange(1, 4)  # gaps: other queues' records
            self.next_off[pp] = off + 1
            key = rng.choice(KEYS)
            if key is None:
                self.spread += 1
                h = self.spread
            else:
                h = key_hash(key)
            m = MMsg(pp, off, key, rng.choice(CONTEXTS), h, ts=self.now)
            if self.delays:
                m.priority = rng.choice([0, 0, 1, 5, 9])
                if rng.random() < 0.3:
                    m.deliver_at = self.now + rng.choice([1, 50, 120, 400])
            self.msgs.append(m)
            self.by_id[m.mid] = m
            self._read(m)
            self.gd.mark_scanned(pp, off + 1)
        self.check_lag()

    def _read(self, m: MMsg) -> None:
        """The ingestor meets ``m`` in the log: a delayed record is deferred; before any
        other, what came due by its timestamp joins first."""
        if m.deliver_at is not None:
            assert self.gd.defer(m.entry(), m.deliver_at) is True
            assert self.gd.defer(m.entry(), m.deliver_at) is False  # idempotent
            m.status = DEFERRED
            return
        self._take_due(min(m.ts, self.now))
        self._join(m)
        assert self.gd.ingest(m.entry()) is True
        assert self.gd.ingest(m.entry()) is False  # idempotent

    def _join(self, m: MMsg) -> None:
        m.idx = self.seq
        self.seq += 1
        m.status = PENDING
        if m.key is not None:
            self.chains.setdefault((m.key, m.ctx), []).append(m)

    def _take_due(self, until: int) -> None:
        """Deferred messages due by ``until`` join their keys, earliest first."""
        due = sorted((m for m in self.msgs if m.status == DEFERRED and m.deliver_at <= until),
                     key=lambda m: (m.deliver_at, m.pp, m.offset))
        got = self.gd.take_due(until, 1_000_000)
        assert got == [(m.deliver_at, m.pp, m.offset) for m in due], (got, due)
        for m in due:
            self._join(m)
            assert self.gd.ingest(m.entry()) is True

    def join(self, ctx: IsolationContext) -> str:
        self.n_cids += 1
        cid = f"c{self.n_cids}"
        self.consumers[cid] = ctx
        self._reassign()
        return cid

    def leave(self, cid: str, graceful: bool) -> None:
        del self.consumers[cid]
        held = sorted((m for m in self.msgs if m.status == INFLIGHT and m.holder == cid), key=lambda m: m.idx)
        for m in held:
            if m.status == INFLIGHT:  # an earlier message of its run may have taken it back
                self._fail(m)
        if graceful:
            assert self.gd.leave(cid, self.now) == len(held)
        self._reassign()
        self.check_dead_letters()
        assert not self.gd.is_member(cid)

    def advance(self, dt: int) -> None:
        self.now += dt
        self.gd.expire(self.now)
        self._take_due(self.now)
        for m in sorted(self.msgs, key=lambda m: m.idx):  # a run's first message fails first
            if m.status == INFLIGHT and m.due <= self.now:
                self._fail(m)
            elif m.status == DELAYED and m.due <= self.now:
                m.status = PENDING
        self.check_dead_letters()
        self.check_lag()

    def _heads(self) -> list[MMsg]:
        """The messages ready now: pending, and the next of their key."""
        out = []
        for m in self.msgs:
            if m.status != PENDING:
                continue
            if self.cfg.ordering == "key" and m.key is not None:
                chain = self.chains[(m.key, m.ctx)]
                if any(e.status not in DONE for e in chain[: chain.index(m)]):
                    continue
            out.append(m)
        return out

    def poll(self, cid: str, max_messages: int) -> list[str]:
        self.gd.expire(self.now)
        heads = self._heads()
        got = self.gd.poll(cid, max_messages, self.now)
        self.check_dead_letters(expect_none=True)
        assert len(got) <= max_messages
        live = set(self.consumers.values())
        my_ctx = self.consumers[cid]
        last_rank: tuple[int, int] | None = None
        in_poll: set[str] = set()
        mask = self.v - 1
        own = set(self.assignment.vps_of(cid)) if self.assignment else set()  # type: ignore[union-attr]
        # a poll serves the consumer's own vps; only with stealing, and only when none
        # of its own had anything ready, a whole batch of the others' vps
        stolen = bool(got) and all(d.vp not in own for d in got)
        worst: tuple[int, int] | None = None
        assert not stolen or self.cfg.steal_when_idle, (cid, got)
        for d in got:
            m = self.by_id[d.message_id]
            assert m.status == PENDING, (d, m.status)
            assert (d.pp, d.offset, d.key, d.ctx) == (m.pp, m.offset, m.key, m.ctx)
            assert d.delivery_count == m.count + 1, (d, m)
            assert d.deadline_ms == self.now + self.cfg.visibility_timeout_ms
            # isolation: decided now, over the live contexts; env never crossed
            assert route(m.ctx, live) == my_ctx and my_ctx.env == m.ctx.env
            assert d.vp == m.khash & mask and (d.vp in own) != stolen
            # per-key order: every earlier message of the key is done or came just
            # before in this poll (a run)
            run_start = True
            if self.cfg.ordering == "key" and m.key is not None:
                chain = self.chains[(m.key, m.ctx)]
                earlier_ones = chain[: chain.index(m)]
                for earlier in earlier_ones:
                    assert earlier.status in DONE or earlier.mid in in_poll, (
                        f"{m.mid} delivered while earlier {earlier.mid} is {earlier.status}"
                    )
                undone = [e for e in earlier_ones if e.status not in DONE]
                run_start = not undone
                if undone:
                    assert got[[x.message_id for x in got].index(d.message_id) - 1].message_id == undone[-1].mid, (
                        "a run is contiguous in the poll"
                    )
            # runs start by rank within one poll: higher priority, then redeliveries
            if run_start:
                assert last_rank is None or m.rank >= last_rank, ("a run started out of rank", m, last_rank)
                last_rank = m.rank
            in_poll.add(d.message_id)
            if run_start:
                m_rank_taken = m.rank
                worst = m_rank_taken if worst is None or m_rank_taken > worst else worst
            m.status, m.holder, m.count, m.due = INFLIGHT, cid, m.count + 1, d.deadline_ms
            m.delivered_ever += 1
        # priority: no run head this poll could take is left behind for a lower-ranked one
        if worst is not None:
            for m in heads:
                if m.mid in in_poll or route(m.ctx, live) != my_ctx:
                    continue
                if stolen or (m.khash & mask) in own:
                    assert m.rank >= worst, ("a higher-ranked ready message was left behind", m, worst)
        self.deliveries += len(got)
        self.check_lag()
        return [d.message_id for d in got]

    def held_by(self, cid: str) -> list[MMsg]:
        return [m for m in self.msgs if m.status == INFLIGHT and m.holder == cid]

    def ack(self, cid: str, rng: random.Random, fraction: float) -> None:
        mine = [m for m in self.held_by(cid) if rng.random() < fraction]
        others = [m for m in rng.sample(self.msgs, min(3, len(self.msgs))) if not (m.status == INFLIGHT and m.holder == cid)]
        ids = [m.mid for m in mine + others] + [m.mid for m in mine[:1]]  # a duplicate id too
        rng.shuffle(ids)
        assert self.gd.ack(cid, ids) == len(mine)
        for m in mine:
            m.status, m.holder = ACKED, None
        self.check_lag()

    def nack(self, cid: str, rng: random.Random, delay: int) -> None:
        mine = [m for m in self.held_by(cid) if rng.random() < 0.5]
        ids = [m.mid for m in mine]
        rng.shuffle(ids)
        assert self.gd.nack(cid, ids, delay, self.now) == len(mine)
        for m in sorted(mine, key=lambda m: m.idx):
            if m.status == INFLIGHT:
                self._fail(m, delay)
            elif m.status == PENDING and delay > 0:  # taken back by an earlier one of its run: delayed as asked
                m.status, m.due = DELAYED, self.now + delay
        self.check_dead_letters()
        self.check_lag()

    def failover(self, json_roundtrip: bool) -> None:
        """A new read node takes over from the persisted ack state and re-reads the log."""
        state: dict = self.gd.ack_state() if self.form == "pair" else self.gd.compact_ack_state()  # type: ignore[type-arg]
        if json_roundtrip and self.form == "compact":
            state = {pp: PartitionAckState.from_json(s.to_json()) for pp, s in state.items()}
        elif json_roundtrip:  # as a store of the pair form would: an object with the two attributes
            state = {pp: SimpleNamespace(low_watermark=lw, acked_above=above) for pp, (lw, above) in state.items()}
        self.gd = GroupDelivery(self.cfg)
        self.gd.restore(state)
        self.gd.set_virtual_partitions(self.v)
        if self.consumers:
            self.gd.set_consumers(self._specs(), self.now, self.v)
        for chain in self.chains.values():  # the keys' held messages join again as re-read
            chain[:] = [m for m in chain if m.status in (ACKED, DEAD)]
        for m in self.msgs:
            if m.status not in (ACKED, DEAD):
                m.status = "unread"
        for m in self.msgs:  # re-read everything in the original (lineage) order
            if m.status in (ACKED, DEAD):
                assert self.gd.ingest(m.entry()) is False, (m.mid, m.status)
                if m.deliver_at is not None:
                    assert self.gd.defer(m.entry(), m.deliver_at) is False
                continue
            m.holder, m.count, m.taken = None, 0, False
            self._read(m)
        self._take_due(self.now)
        for pp, nxt in self.next_off.items():
            self.gd.mark_scanned(pp, nxt)
        self.check_lag()

    def drain(self, rng: random.Random) -> None:
        """Consumers for every env poll and ack until everything is done."""
        for env in sorted({m.ctx.env for m in self.msgs}):
            if not any(c.env == env and c.set == "" and c.lane == "" for c in self.consumers.values()):
                self.join(IsolationContext(env, "", ""))
        for _ in range(2 * self.cfg.max_deliveries + 4):
            self.advance(1000)  # past every visibility deadline and nack delay
            progress = True
            while progress:
                progress = False
                for cid in sorted(self.consumers):
                    if self.poll(cid, 1000):
                        progress = True
                        self.ack(cid, rng, 1.0)
            self.confirm_dead(1.0, rng)
            if all(m.status in (ACKED, DEAD) for m in self.msgs):
                break
        assert all(m.status in (ACKED, DEAD) for m in self.msgs), [m for m in self.msgs if m.status not in DONE][:5]
        assert self.gd.lag().total == 0
        assert self.gd.outstanding() == 0
        for pp, st in self.gd.compact_ack_state().items():
            assert st.pending_below == () and st.acked_above == () and st.low_watermark == self.next_off[pp]
        if self.form == "pair":
            assert self.gd.ack_state() == {pp: (nxt, []) for pp, nxt in self.next_off.items() if pp in self.gd.ack_state()}
