"""The ingestor while the tailer keeps indexing (a fake tailer pool, a real
``GroupDelivery``): records the tailer indexes while a scan awaits a read from the
write node (a record not in the cache: a cold context's, or one evicted) are not in
the entries that scan took, so its cursor must stop below them and the next step
ingests them; none is passed over."""

from __future__ import annotations

from tests.read_nodes.test_service_parts import _Pool
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import DeliveryConfig
from vpq.read_nodes.ingestor import Ingestor
from vpq.read_nodes.lineage_order import LineageOrder
from vpq.read_nodes.messages import TailedRecord

QUEUE = 7


class _SlowSource:
    """Serves the pool's records, but the ones in ``uncached`` only through ``get``,
    during which the tailer indexes the next part of the log (``on_read``)."""

    def __init__(self, pool: _Pool) -> None:
        self.records = pool.source.records
        self.uncached: set[tuple[int, int]] = set()
        self.on_read: list[object] = []
        self.reads = 0

    def cached(self, pp: int, offset: int) -> TailedRecord | None:
        if (pp, offset) in self.uncached:
            return None
        return self.records.get((pp, offset))

    async def get(self, pp: int, offset: int) -> TailedRecord | None:
        self.reads += 1
        while self.on_read:
            self.on_read.pop(0)()  # type: ignore[operator]
        return self.records.get((pp, offset))


async def test_records_indexed_while_a_scan_awaits_a_read_are_not_passed_over() -> None:
    pool = _Pool([0])
    source = _SlowSource(pool)
    pool.source = source  # type: ignore[assignment]
    for offset in (9, 19):  # the first read of the tailer: keeper's records among others'
        pool.add(0, offset, QUEUE, b"k", 5)
    pool.tailers[0].index.advance(0, 20)
    source.uncached.add((0, 19))  # its context was cold when the tailer read it: not cached

    def tail_more() -> None:  # the tailer's next reads land while the scan awaits 19
        for offset in (29, 39, 49):
            pool.add(0, offset, QUEUE, b"k", 5)
        pool.tailers[0].index.advance(0, 60)

    source.on_read.append(tail_more)
    delivery = GroupDelivery(DeliveryConfig(virtual_partitions=1))
    delivery.join("c", IsolationContext(), [0], 0)
    ing = Ingestor(QUEUE, delivery, pool, "g", lambda pp: None)  # type: ignore[arg-type]
    ing.add_pp(0, 0)
    ing.set_lineage(LineageOrder({}), 0)
    await ing.step(0)
    assert source.reads == 1
    got: list[int] = []
    for _ in range(10):  # one key: one message out at a time
        await ing.step(0)
        batch = delivery.poll("c", 100, 0)
        delivery.ack("c", [d.message_id for d in batch])
        got += [d.offset for d in batch]
    assert got == [9, 19, 29, 39, 49]
    assert ing.expired == 0
