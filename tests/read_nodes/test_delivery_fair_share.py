"""GroupDelivery's fair share (with ``steal_when_idle``): when every member already holds
work and fewer messages are ready than a full poll for each, a poll takes
``ceil(ready / members)``, so the end of a backlog does not go a whole poll at a time
to whoever asks first."""

from __future__ import annotations

from vpq.isolation.context import IsolationContext as Ctx
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import DeliveryConfig, DeliveryEntry
from vpq.virtual_partitions.hashing import key_hash

PROD = Ctx()
TEST = Ctx(env="test")
V = 4
MEMBERS = ("a", "b", "c", "d")


def group(members: tuple[str, ...] = MEMBERS, steal: bool = True) -> GroupDelivery:
    g = GroupDelivery(DeliveryConfig(virtual_partitions=V, visibility_timeout_ms=10_000, steal_when_idle=steal))
    for i, m in enumerate(members):
        g.join(m, PROD, [vp for vp in range(V) if vp % len(members) == i], 0)
    return g


def ingest(g: GroupDelivery, start: int, n: int, ctx: Ctx = PROD) -> None:
    for off in range(start, start + n):
        key = f"k{off}".encode()  # every message its own key: nothing waits for order
        g.ingest(DeliveryEntry(0, off, key_hash(key), key, ctx, off))


def make_busy(g: GroupDelivery, members: tuple[str, ...] = MEMBERS) -> int:
    """Give every member one message in flight; returns the next free offset."""
    ingest(g, 0, len(members))
    for m in members:
        assert len(g.poll(m, 1, 1)) == 1
    return len(members)


def test_busy_members_share_a_short_backlog() -> None:
    g = group()
    nxt = make_busy(g)
    ingest(g, nxt, 8)  # 8 ready < 4 members x 10
    assert len(g.poll("a", 10, 2)) == 2  # ceil(8 / 4)
    assert len(g.poll("b", 10, 2)) == 2  # ceil(6 / 4)
    assert len(g.poll("c", 10, 2)) == 1  # ceil(4 / 4)
    assert len(g.poll("d", 10, 2)) == 1  # ceil(3 / 4)
    assert len(g.poll("a", 10, 2)) == 1  # ceil(2 / 4): at least one, never zero
    assert len(g.poll("b", 10, 2)) == 1
    assert g.poll("c", 10, 2) == []


def test_a_backlog_of_a_full_poll_per_member_is_not_limited() -> None:
    g = group()
    nxt = make_busy(g)
    ingest(g, nxt, 40)  # 4 members x 10
    assert len(g.poll("a", 10, 2)) == 10


def test_members_that_hold_nothing_take_whole_polls() -> None:
    g = group()
    for m in MEMBERS:
        g.set_vps(m, range(V) if m == "a" else [])
    ingest(g, 0, 8)
    assert len(g.poll("a", 10, 1)) == 8  # nobody holds work: a trickle is not scarce


def test_a_lone_member_takes_everything_ready() -> None:
    g = group(("a",))
    nxt = make_busy(g, ("a",))
    ingest(g, nxt, 8)
    assert len(g.poll("a", 10, 2)) == 8


def test_without_stealing_polls_are_not_limited() -> None:
    g = group(steal=False)
    for m in MEMBERS:
        g.set_vps(m, range(V) if m == "a" else [])
    nxt = make_busy(g, ("a",))
    ingest(g, nxt, 8)
    assert len(g.poll("a", 10, 2)) == 8


def test_the_share_counts_only_the_members_of_the_pollers_context() -> None:
    g = group()
    g.join("t1", TEST, [0, 1, 2, 3], 0)  # a test-env member: it never sees prod's messages
    nxt = make_busy(g)
    ingest(g, nxt, 8)
    assert len(g.poll("a", 10, 2)) == 2  # 8 ready over the 4 prod members, not 5


def test_the_in_flight_counts_follow_acks_leaves_and_timeouts() -> None:
    g = group()
    make_busy(g)
    ingest(g, 10, 6)
    got = g.poll("a", 10, 2)
    assert g.in_flight_by_context() == {PROD: 4 + len(got)}
    g.ack("a", [d.message_id for d in got])
    assert g.in_flight_by_context() == {PROD: 4}
    g.leave("b", 3)  # its message goes back to ready
    assert g.in_flight_by_context() == {PROD: 3}
    g.expire(20_000)  # every delivery timed out
    assert g.in_flight_by_context() == {}
    assert sum(m.inflight for m in g.members()) == 0
