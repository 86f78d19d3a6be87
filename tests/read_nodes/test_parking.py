"""What a group leaves in the log instead of memory: a context no live consumer may
take (its stream stops), a key holding its read-ahead (parked, refilled in order),
and how both survive a takeover through the compact ack state."""

from __future__ import annotations

from tests.read_nodes.test_service_parts import _Pool
from vpq.codec.records import Record
from vpq.isolation.context import IsolationContext
from vpq.metadata.acks import decode_state, encode_state
from vpq.read_nodes.ack_persistence import restored_states, trim_state
from vpq.read_nodes.ack_tracker import PartitionAckState
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import Admission, DeliveryConfig, DeliveryEntry, stream_of
from vpq.read_nodes.ingestor import Ingestor
from vpq.read_nodes.lineage_order import LineageOrder
from vpq.read_nodes.messages import tailed_record

PROD = IsolationContext()
TEST = IsolationContext(env="test")
PROD_ID, TEST_ID = 1, 2


class Log:
    """One pp of one queue (id 7) in the fake pool, records appended in order."""

    def __init__(self, pool: _Pool, pp: int = 0) -> None:
        self.pool = pool
        self.pp = pp
        self.next = 0

    def add(self, key: bytes, key_hash: int, ctx: IsolationContext = PROD, ctx_id: int = PROD_ID) -> int:
        off = self.next
        self.next += 1
        from vpq.read_nodes.tailer import pack_ref

        self.pool.tailers[self.pp].index.add(self.pp, off, 7, pack_ref(ctx_id, key_hash), ctx_id)
        rec = Record(value=str(off).encode(), queue_id=7, key=key, key_hash=key_hash, offset=off, timestamp_ms=1000 + off)
        self.pool.source.records[(self.pp, off)] = tailed_record(self.pp, rec, ctx)
        return off


def group(**cfg: int) -> tuple[_Pool, Log, GroupDelivery, Ingestor]:
    pool = _Pool([0])
    delivery = GroupDelivery(DeliveryConfig(virtual_partitions=1, **cfg))
    ing = Ingestor(7, delivery, pool, "g", lambda pp: None)  # type: ignore[arg-type]
    ing.add_pp(0, 0)
    ing.set_lineage(LineageOrder({}), 0)
    return pool, Log(pool), delivery, ing


def entry(off: int, key: bytes | None, ctx: IsolationContext = PROD, ctx_id: int = PROD_ID) -> DeliveryEntry:
    return DeliveryEntry(0, off, 5 if key else off, key, ctx, 0, ctx_id)


def test_admit_says_nobody_for_a_context_no_live_consumer_takes() -> None:
    g = GroupDelivery(DeliveryConfig())
    g.join("p", PROD, range(16), 0)
    assert g.admit(stream_of(0, TEST_ID), 0, TEST, TEST_ID, 5, b"k") == Admission.NOBODY
    assert g.admit(stream_of(0, PROD_ID), 0, PROD, PROD_ID, 5, b"k") == Admission.INGEST
    g.join("t", TEST, range(16), 0)
    assert g.admit(stream_of(0, TEST_ID), 0, TEST, TEST_ID, 5, b"k") == Admission.INGEST


def test_admit_parks_a_key_at_its_read_ahead_and_pauses_only_new_keys_when_ready_is_full() -> None:
    g = GroupDelivery(DeliveryConfig(key_read_ahead=3, max_unacked=4))
    g.join("p", PROD, range(16), 0)
    s = stream_of(0, PROD_ID)
    for off in range(3):
        assert g.admit(s, off, PROD, PROD_ID, 5, b"hot") == Admission.INGEST
        g.ingest(entry(off, b"hot"))
    assert g.admit(s, 3, PROD, PROD_ID, 5, b"hot") == Admission.PARK  # its read-ahead is full
    g.ingest(entry(3, b"other"))
    assert g.ready_held() == 4
    assert g.admit(s, 4, PROD, PROD_ID, 9, b"new") == Admission.PAUSE  # enough is ready
    got = g.poll("p", 10, 0)  # the runs are out: nothing ready is held now
    assert len(got) == 4 and g.ready_held() == 0
    assert g.admit(s, 4, PROD, PROD_ID, 9, b"new") == Admission.INGEST


async def test_an_env_nobody_consumes_stays_in_the_log_and_never_holds_back_prod() -> None:
    pool, log, delivery, ing = group(max_unacked=50)
    for i in range(2000):
        log.add(b"t%d" % (i % 7), 100 + i % 7, TEST, TEST_ID)
    prod = [log.add(b"p%d" % (i % 3), 10 + i % 3) for i in range(30)]
    delivery.join("p", PROD, [0], 0)
    await ing.step(0)
    got = delivery.poll("p", 100, 1)
    assert sorted(d.offset for d in got) == prod
    assert delivery.outstanding() == 30  # nothing of env test is held in memory
    assert ing.cursors[stream_of(0, TEST_ID)] == 0 and ing.cursors[stream_of(0, PROD_ID)] == log.next
    backlog = ing.backlog()
    assert backlog == {(TEST_ID, 0): 2000}
    # a test consumer joins: the stream flows from where it stopped
    delivery.join("t", TEST, [0], 2)
    total = 0
    for _ in range(100):
        await ing.step(3)
        batch = delivery.poll("t", 1000, 3)
        total += len(batch)
        delivery.ack("t", [d.message_id for d in batch])
        if total == 2000:
            break
    assert total == 2000


async def test_a_parked_key_is_refilled_in_order_while_other_keys_flow() -> None:
    pool, log, delivery, ing = group(key_read_ahead=10)
    delivery.join("c", PROD, [0], 0)
    hot = [log.add(b"hot", 5) for _ in range(25)]
    cold = [log.add(b"c%d" % i, 50 + i) for i in range(5)]
    hot += [log.add(b"hot", 5) for _ in range(5)]
    await ing.step(0)
    assert delivery.outstanding() == 10 + 5 and len(ing.parked) == 1  # 20 of the hot key wait in the log
    state = delivery.compact_ack_state()[stream_of(0, PROD_ID)]
    assert [(h, start) for h, start, _ in state.parked] == [(5, 10)] and not state.is_done(12, 5)
    assert state.is_done(12, 50)  # other keys' offsets are not covered
    seen: list[int] = []
    for t in range(1, 20):
        got = delivery.poll("c", 7, t)
        seen += [d.offset for d in got if d.key == b"hot"]
        delivery.ack("c", [d.message_id for d in got])
        await ing.step(t)
    assert seen == hot  # every message of the key, in order
    assert len(ing.parked) == 0 and delivery.parked_keys() == 0 and delivery.outstanding() == 0
    assert all(delivery.is_done(stream_of(0, PROD_ID), o, 5) for o in hot + cold)


async def test_the_read_ahead_position_is_where_the_group_still_reads_from() -> None:
    """The tailer's read-ahead position (``scanned_to``) is the most advanced stream's
    cursor, or the start of its earliest parked segment: a parked record is read there
    later, so the tailer must not race past it on the strength of the cursor."""
    pool, log, delivery, ing = group(key_read_ahead=10)
    tailer = pool.tailers[0]
    delivery.join("c", PROD, [0], 0)
    for i in range(300):  # an env nobody consumes: its stream stops at 0
        log.add(b"t", 100, TEST, TEST_ID)
    [log.add(b"hot", 5) for _ in range(25)]  # 300..324: 310 on wait in the log
    [log.add(b"c%d" % i, 50 + i) for i in range(5)]
    await ing.step(0)
    assert ing.cursors[stream_of(0, PROD_ID)] == log.next and ing.cursors[stream_of(0, TEST_ID)] == 0
    assert tailer.scanned["g"] == 310 and tailer.positions["g"] == 0
    for t in range(1, 10):  # the hot key drains: the position follows its parked segment
        got = delivery.poll("c", 100, t)
        delivery.ack("c", [d.message_id for d in got])
        log.add(b"n%d" % t, 60 + t)  # a new record makes the cursor move, and the position be told
        await ing.step(t)
    assert len(ing.parked) == 0 and tailer.scanned["g"] == log.next


async def test_parked_keys_survive_a_takeover_through_the_compact_state() -> None:
    pool, log, delivery, ing = group(key_read_ahead=4)
    delivery.join("c", PROD, [0], 0)
    hot = [log.add(b"hot", 5) for _ in range(12)]
    other = log.add(b"x", 9)
    await ing.step(0)
    first = delivery.poll("c", 2, 1)
    delivery.ack("c", [first[0].message_id])  # 0 done; 1 in flight; 2, 3 held; 4.. parked
    stream = stream_of(0, PROD_ID)
    blobs = {stream: encode_state(7, 1, st) for stream, st in delivery.compact_ack_state().items()}
    restored = restored_states({s: decode_state(b)[2] for s, b in blobs.items()})
    assert restored[stream].parked and trim_state(restored[stream], 0, 0).parked == restored[stream].parked
    # a successor restores and re-reads the same log
    d2 = GroupDelivery(DeliveryConfig(virtual_partitions=1, key_read_ahead=4))
    d2.restore(restored)
    ing2 = Ingestor(7, d2, pool, "g2", lambda pp: None)  # type: ignore[arg-type]
    ing2.add_pp(0, 0)
    ing2.set_lineage(LineageOrder({}), 0)
    d2.join("c", PROD, [0], 0)
    seen: list[int] = []
    for t in range(1, 30):
        await ing2.step(t)
        got = d2.poll("c", 3, t)
        seen += [d.offset for d in got]
        d2.ack("c", [d.message_id for d in got])
    assert [o for o in seen if o != other] == hot[1:]  # everything not acked, in key order, once
    assert other in seen


def test_a_compact_state_with_parked_segments_round_trips_and_old_states_still_read() -> None:
    st = PartitionAckState(100, (3, 7), (104,), ((5, 10, 50), (9, 60, None)))
    qid, token, back = decode_state(encode_state(7, 2, st))
    assert (qid, token, restored_states({0: back})[0]) == (7, 2, st)
    assert st.low_watermark == 3 and not st.is_done(20, 5) and st.is_done(20, 6) and not st.is_done(70, 9)
    assert st.is_done(55, 5)  # past the closed segment's end
    legacy = "1|7|2|100|3:0,4|4"
    assert restored_states({0: decode_state(legacy)[2]}) == {0: PartitionAckState(100, (3, 7), (104,))}


def test_contexts_cold_for_every_reader_of_a_queue_are_not_cached() -> None:
    from types import SimpleNamespace

    from vpq.read_nodes.tailer_pool import TailerPool

    pool = TailerPool(SimpleNamespace(cold={}))  # type: ignore[arg-type]
    pool.set_cold("g1", 7, frozenset({TEST_ID, 3}))
    assert pool.source.cold == {7: {TEST_ID, 3}}
    pool.set_cold("g2", 7, frozenset({TEST_ID}))  # another group of the queue takes context 3
    assert pool.source.cold == {7: {TEST_ID}}
    pool.set_cold("g2", 7, frozenset())
    assert pool.source.cold == {}
    pool.set_cold("g2", 7, None)  # g2 stopped reading: g1's view alone
    assert pool.source.cold == {7: {TEST_ID, 3}}
    pool.set_cold("g1", 7, None)
    assert pool.source.cold == {}


async def test_the_ingestor_reports_the_contexts_it_cannot_deliver() -> None:
    pool, log, delivery, ing = group()
    reports: list[tuple[object, int, frozenset[int] | None]] = []
    pool.set_cold = lambda key, qid, ctxs: reports.append((key, qid, ctxs))  # type: ignore[attr-defined]
    log.add(b"t", 1, TEST, TEST_ID)
    log.add(b"p", 2)
    delivery.join("p", PROD, [0], 0)
    await ing.step(0)
    assert reports == [("g", 7, frozenset({TEST_ID}))]
    delivery.join("t", TEST, [0], 1)
    await ing.step(1)
    assert reports[-1] == ("g", 7, frozenset())
    await ing.close()
    assert reports[-1] == ("g", 7, None)


def test_a_state_kept_per_pp_alone_holds_for_every_context_of_that_pp() -> None:
    """An ack state persisted per pp (format 1, before streams) restores every context's
    stream of that pp: nothing done there is delivered again, nothing else is lost."""
    legacy = restored_states({0: decode_state("1|7|2|10|4:0|")[2]})  # offsets < 10 of pp 0 done, except 4
    g = GroupDelivery(DeliveryConfig(virtual_partitions=1))
    g.restore(legacy)
    g.join("p", PROD, [0], 0)
    g.join("t", TEST, [0], 0)
    s_prod, s_test = stream_of(0, PROD_ID), stream_of(0, TEST_ID)
    assert g.low_watermark(s_prod) == g.low_watermark(s_test) == 4
    for off in range(12):
        ctx, cid = (PROD, PROD_ID) if off % 2 else (TEST, TEST_ID)
        g.ingest(DeliveryEntry(0, off, 100 + off, b"k%d" % off, ctx, 0, cid))
    got = sorted(d.offset for c in ("p", "t") for d in g.poll(c, 100, 1))
    assert got == [4, 10, 11]
