"""GroupDelivery with ``steal_when_idle``: a consumer with nothing ready in its own vps
takes what is ready in the others', within the same routing and the same per-key rule."""

from __future__ import annotations

from vpq.isolation.context import IsolationContext as Ctx
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import DeliveryConfig, DeliveryEntry
from vpq.virtual_partitions.hashing import key_hash

PROD = Ctx()
TEST = Ctx(env="test")
V = 4


def keys_in_vp(vp: int, n: int) -> list[bytes]:
    out: list[bytes] = []
    i = 0
    while len(out) < n:
        k = f"k{i}".encode()
        if key_hash(k) % V == vp:
            out.append(k)
        i += 1
    return out


def gd(steal: bool) -> GroupDelivery:
    return GroupDelivery(DeliveryConfig(virtual_partitions=V, visibility_timeout_ms=1000, steal_when_idle=steal))


def ingest(g: GroupDelivery, offset: int, key: bytes, ctx: Ctx = PROD) -> str:
    g.ingest(DeliveryEntry(0, offset, key_hash(key), key, ctx, offset))
    return f"0-{offset}"


def test_idle_consumer_takes_the_others_ready_messages_only_when_stealing() -> None:
    for steal in (False, True):
        g = gd(steal)
        g.join("a", PROD, [0, 1], 0)
        g.join("b", PROD, [2, 3], 0)
        k1, k2 = keys_in_vp(0, 2)
        ids = [ingest(g, 0, k1), ingest(g, 1, k1), ingest(g, 2, k2)]
        assert g.has_ready("b") is steal
        got = [d.message_id for d in g.poll("b", 10, 1)]
        # each key's ready run: k1's two messages in order, then k2's
        assert got == (ids if steal else [])


def test_a_consumer_with_work_of_its_own_does_not_steal() -> None:
    g = gd(True)
    g.join("a", PROD, [0, 1], 0)
    g.join("b", PROD, [2, 3], 0)
    (ka,) = keys_in_vp(0, 1)
    (kb,) = keys_in_vp(2, 1)
    mine = ingest(g, 0, kb)
    ingest(g, 1, ka)
    assert [d.message_id for d in g.poll("b", 10, 1)] == [mine]


def test_stolen_messages_keep_per_key_order_across_consumers() -> None:
    g = gd(True)
    g.join("a", PROD, [0, 1], 0)
    g.join("b", PROD, [2, 3], 0)
    (k,) = keys_in_vp(0, 1)
    first = ingest(g, 0, k)
    assert [d.message_id for d in g.poll("b", 10, 1)] == [first]  # stolen by b
    second = ingest(g, 1, k)
    assert g.poll("a", 10, 2) == [] and g.poll("b", 10, 2) == []  # the key waits for b's ack
    assert g.ack("b", [first]) == 1
    assert [d.message_id for d in g.poll("a", 10, 3)] == [second]  # back to the owner


def test_stealing_never_crosses_routing() -> None:
    g = gd(True)
    g.join("prod", PROD, [0, 1], 0)
    g.join("tester", TEST, [0, 1, 2, 3], 0)
    (k,) = keys_in_vp(2, 1)
    ingest(g, 0, k, PROD)  # vp 2 has no prod owner: it waits, and a test consumer never takes it
    assert not g.has_ready("tester") and g.poll("tester", 10, 1) == []
    assert [d.message_id for d in g.poll("prod", 10, 1)] == ["0-0"]  # prod's idle member steals it


def test_a_member_without_vps_helps_only_when_stealing() -> None:
    for steal in (False, True):
        g = gd(steal)
        g.join("a", PROD, range(V), 0)
        g.join("spare", PROD, [], 0)  # more members than vps
        (k,) = keys_in_vp(1, 1)
        ingest(g, 0, k)
        assert g.has_ready("spare") is steal
        assert [d.message_id for d in g.poll("spare", 10, 1)] == (["0-0"] if steal else [])
