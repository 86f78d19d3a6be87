"""The ingestor and delayed records (a fake tailer pool, a real ``GroupDelivery``, an
injected clock): a record with a due time is deferred where the cursor meets it and
ingested once due; while the cursor reads a backlog, what came due joins its key
before the first record written at or after its due time; priority reaches the
delivery state."""

from __future__ import annotations

from tests.read_nodes.test_service_parts import _Pool
from vpq.codec.records import Record
from vpq.codec.system_headers import attribute_headers
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import DeliveryConfig
from vpq.read_nodes.ingestor import Ingestor
from vpq.read_nodes.lineage_order import LineageOrder
from vpq.read_nodes.messages import TailedRecord, tailed_record
from vpq.read_nodes.tailer import pack_ref

PROD = IsolationContext()
CTX_ID = 1


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def setup(now: int) -> tuple[_Pool, GroupDelivery, Ingestor, Clock]:
    pool = _Pool([0])
    delivery = GroupDelivery(DeliveryConfig(virtual_partitions=1))
    delivery.join("c", PROD, [0], 0)
    clock = Clock(now)
    ing = Ingestor(7, delivery, pool, "g", lambda pp: None, clock=clock)  # type: ignore[arg-type]
    ing.add_pp(0, 0)
    ing.set_lineage(LineageOrder({}), 0)
    return pool, delivery, ing, clock


def add(pool: _Pool, offset: int, key: bytes, ts: int, due: int | None = None, priority: int = 0) -> None:
    pool.tailers[0].index.add(0, offset, 7, pack_ref(CTX_ID, 5), CTX_ID)
    headers = attribute_headers(due, priority, None) + (("h", b"v"),)
    rec = Record(value=b"x", queue_id=7, key=key, key_hash=5, context_id=CTX_ID, offset=offset, timestamp_ms=ts,
                 headers=headers)
    pool.source.records[(0, offset)] = tailed_record(0, rec, PROD)


def offsets(delivery: GroupDelivery, now: int) -> list[int]:
    got = delivery.poll("c", 100, now)
    delivery.ack("c", [d.message_id for d in got])
    return [d.offset for d in got]


async def test_a_delayed_record_waits_then_joins_its_key_when_due() -> None:
    pool, delivery, ing, clock = setup(1000)
    add(pool, 0, b"k", 1000, due=5000)
    add(pool, 1, b"k", 1001)
    res = await ing.step(0)
    assert (res.deferred, res.ingested, delivery.delayed()) == (1, 1, 1)
    assert offsets(delivery, 1) == [1]  # the immediate one does not wait for the delayed one logged before it
    clock.now = 4999
    await ing.step(2)
    assert offsets(delivery, 3) == []
    clock.now = 5000
    res = await ing.step(4)
    assert res.released == 1 and offsets(delivery, 5) == [0] and delivery.delayed() == 0


async def test_reading_a_backlog_puts_delayed_records_where_they_came_due() -> None:
    pool, delivery, ing, _clock = setup(10_000)  # the whole log is read in one step, long after
    add(pool, 0, b"k", 1000, due=2000)
    add(pool, 1, b"k", 1500)  # written before the delayed one came due: goes first
    add(pool, 2, b"k", 2500)  # written after: goes behind it
    add(pool, 3, b"k", 1200, due=3000)
    add(pool, 4, b"k", 3500)
    await ing.step(0)
    assert offsets(delivery, 1) == [1, 0, 2, 3, 4]  # one run of the key, in due-time order


async def test_priority_reaches_the_delivery_state() -> None:
    pool, delivery, ing, _clock = setup(1000)
    for offset, (key, priority) in enumerate([(b"a", 1), (b"b", 8), (b"c", 4)]):  # three keys
        add(pool, offset, key, 1000, priority=priority)
    await ing.step(0)
    assert offsets(delivery, 1) == [1, 2, 0]


async def test_a_record_deferred_for_long_leaves_the_record_cache_and_is_read_again() -> None:
    pool, delivery, ing, clock = setup(1000)
    stored = pool.source.records  # what the write node holds

    class CachingSource:
        def __init__(self) -> None:
            self.cache = dict(stored)

        def cached(self, pp: int, offset: int) -> TailedRecord | None:
            return self.cache.get((pp, offset))

        async def get(self, pp: int, offset: int) -> TailedRecord | None:
            return stored.get((pp, offset))

        def forget(self, pp: int, offset: int) -> None:
            self.cache.pop((pp, offset), None)

    add(pool, 0, b"a", 1000, due=1000 + 3_600_000)  # an hour away
    add(pool, 1, b"b", 1000, due=6000)  # five seconds away: stays cached
    source = pool.source = CachingSource()  # type: ignore[assignment]
    res = await ing.step(0)
    assert res.deferred == 2
    assert set(source.cache) == {(0, 1)}
    clock.now = 1000 + 3_600_000
    await ing.step(1)
    assert sorted(offsets(delivery, 2)) == [0, 1]  # the far one was read again from the write node
