"""The ingestor's scan with a record source that knows its contexts (as the read
node's does): a stream whose context a live consumer takes is offered record by
record without routing each again (``GroupDelivery.offer_routed``), with the same
outcome as ``offer``: every record held once, in key order, under its position."""

from __future__ import annotations

from tests.read_nodes.test_service_parts import _Pool, _Source
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import DeliveryConfig, stream_of
from vpq.read_nodes.ingestor import Ingestor
from vpq.read_nodes.lineage_order import LineageOrder

QUEUE = 7


class _KnownContexts(_Source):
    def context(self, context_id: int) -> IsolationContext | None:
        return IsolationContext() if context_id == 1 else None


def _setup(max_unacked: int = 100) -> tuple[_Pool, GroupDelivery, Ingestor]:
    pool = _Pool([0])
    pool.source = _KnownContexts()  # type: ignore[assignment]
    for offset in range(8):
        pool.add(0, offset, QUEUE, b"ab"[offset % 2 : offset % 2 + 1], offset % 2)
    delivery = GroupDelivery(DeliveryConfig(virtual_partitions=2, max_unacked=max_unacked))
    ing = Ingestor(QUEUE, delivery, pool, "g", lambda pp: None)  # type: ignore[arg-type]
    ing.add_pp(0, 0)
    ing.set_lineage(LineageOrder({}), 0)
    return pool, delivery, ing


async def test_routed_records_are_held_once_by_position_in_key_order() -> None:
    _pool, delivery, ing = _setup()
    res = await ing.step(0)
    assert res.nobody and res.ingested == 0  # nobody takes the context yet: left in the log
    delivery.join("c", IsolationContext(), [0, 1], 0)
    res = await ing.step(0)
    assert res.ingested == 8 and sorted(delivery._msgs) == [(0, o) for o in range(8)]
    assert all(delivery._msgs[pos].pos is pos for pos in delivery._msgs)
    assert ing.cursors == {stream_of(0, 1): 8}
    assert (await ing.step(0)).ingested == 0  # scanned already: nothing offered twice
    got = delivery.poll("c", 100, 0)
    by_key: dict[bytes | None, list[int]] = {}
    for d in got:
        by_key.setdefault(d.key, []).append(d.offset)
    assert by_key == {b"a": [0, 2, 4, 6], b"b": [1, 3, 5, 7]}


async def test_routed_records_pause_at_max_unacked_and_resume() -> None:
    _pool, delivery, ing = _setup(max_unacked=3)
    delivery.join("c", IsolationContext(), [0, 1], 0)
    res = await ing.step(0)
    assert res.held and delivery.outstanding() < 8
    seen: list[int] = []
    for _ in range(20):
        got = delivery.poll("c", 100, 0)
        seen += [d.offset for d in got]
        delivery.ack("c", [d.message_id for d in got])
        await ing.step(0)
    assert sorted(seen) == list(range(8)) and len(seen) == 8
