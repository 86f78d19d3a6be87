"""The read-node service's pure parts: lineage order, persisted ack state (trimming,
restoring), message rendering, and the ingestor against in-memory tailers."""

from __future__ import annotations

import base64

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.codec.batch_common import VALUE_JSON, VALUE_RAW
from vpq.codec.records import Record
from vpq.isolation.context import IsolationContext
from vpq.metadata.acks import decode_state, encode_state
from vpq.metadata.maps import LineageRange
from vpq.read_nodes.ack_persistence import AckSnapshots, restored_states, trim_state
from vpq.read_nodes.ack_tracker import AckTracker, PartitionAckState
from vpq.read_nodes.dead_letters import dlq_name
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import DeliveryConfig, stream_of
from vpq.read_nodes.ingestor import Ingestor
from vpq.read_nodes.lineage_order import Decision, LineageOrder
from vpq.read_nodes.messages import MessageRenderer, TailedRecord, poll_body, render_message, tailed_record
from vpq.read_nodes.queue_index import QueueIndex
from vpq.read_nodes.tailer import pack_ref, unpack_ref

R = LineageRange


# ------------------------------------------------------------------ lineage order
def test_lineage_order_holds_a_later_range_until_the_earlier_one_is_finished() -> None:
    order = LineageOrder({0: [R(1, 0, 100), R(0, 50, None)]})
    cursors = {1: 40}
    assert order.check(0, 1, 1, 10, lambda pp: cursors.get(pp, 0)) is Decision.INGEST
    assert order.check(0, 1, 0, 60, lambda pp: cursors.get(pp, 0)) is Decision.HOLD
    cursors[1] = 100
    assert order.check(0, 1, 0, 60, lambda pp: cursors.get(pp, 0)) is Decision.INGEST
    # outside every range of a vp that has a lineage: unknown (reload); below the range start too
    assert order.check(0, 1, 2, 5, lambda pp: 0) is Decision.UNKNOWN
    assert order.check(0, 1, 0, 10, lambda pp: 0) is Decision.UNKNOWN
    assert order.pps() == {0, 1} and order.first_offsets() == {1: 0, 0: 50}


def test_lineage_order_uses_the_ancestor_lineage_after_a_split_and_frees_vps_without_one() -> None:
    order = LineageOrder({1: [R(3, 0, 10), R(2, 0, None)]})
    # V grew 2 -> 8: vp 5 (5 mod 2 = 1) has no lineage of its own yet
    assert order.ranges(5, 8) == (R(3, 0, 10), R(2, 0, None))
    assert order.check(5, 8, 2, 0, lambda pp: 0) is Decision.HOLD
    assert order.check(0, 8, 7, 123, lambda pp: 0) is Decision.INGEST  # vp 0 never had a lineage


def test_lineage_order_same_pp_moved_away_and_back() -> None:
    order = LineageOrder({0: [R(0, 0, 10), R(1, 0, 5), R(0, 20, None)]})
    cur = {0: 20, 1: 3}
    assert order.check(0, 1, 0, 25, lambda pp: 25 if pp == 0 else cur[pp]) is Decision.HOLD
    cur[1] = 5
    assert order.check(0, 1, 0, 25, lambda pp: 25 if pp == 0 else cur[pp]) is Decision.INGEST


# ---------------------------------------------------------------- ack persistence
def test_trim_cuts_a_long_backlog_above_the_highest_done_offset() -> None:
    backlog = PartitionAckState(5000, tuple(range(10, 5000)), ())
    trimmed = trim_state(backlog, highest_done=9, floor=0, max_listed=100)
    assert trimmed == PartitionAckState(10, (), ())
    # a stuck message plus many acks after it: already small, kept as is (scanned_to stays high)
    stuck = PartitionAckState(5000, (3, 4990, 4991), ())
    assert trim_state(stuck, highest_done=4989, floor=0, max_listed=100) == stuck
    # never below the floor of a restored state
    assert trim_state(backlog, highest_done=-1, floor=200, max_listed=100).scanned_to == 200


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(st.tuples(st.sampled_from(["ingest", "done", "scan"]), st.integers(0, 60)), max_size=80),
    max_listed=st.integers(0, 5),
)
def test_trimmed_state_restores_exactly_the_not_done_offsets(ops: list[tuple[str, int]], max_listed: int) -> None:
    tracker = AckTracker()
    queue_offsets: set[int] = set()
    done: set[int] = set()
    scanned = 0
    for op, off in ops:
        if op == "ingest" and off >= scanned and off not in queue_offsets:
            queue_offsets.add(off)
            tracker.track(0, off)
        elif op == "done" and off in queue_offsets and off not in done:
            done.add(off)
            tracker.done(0, off)
        elif op == "scan":  # records are only ingested at or above the scan position
            scanned = max(scanned, off)
            tracker.mark_scanned(0, scanned)
    snapshots = AckSnapshots(9)
    for o in done:
        snapshots.note_done(0, o)
    compact = tracker.state()
    if 0 not in compact:
        return
    trimmed = trim_state(compact[0], max(done, default=-1), 0, max_listed)
    restored = AckTracker()
    restored.restore(restored_states({0: decode_state(encode_state(9, 1, trimmed))[2]}))
    for o in queue_offsets:
        assert restored.is_done(0, o) == (o in done), (o, trimmed)
    assert snapshots.trimmed(compact)[0].scanned_to <= compact[0].scanned_to


# -------------------------------------------------------------------- rendering
def _tailed(value: bytes, encoding: int, key: bytes | None, headers: tuple = ()) -> TailedRecord:
    rec = Record(value=value, value_encoding=encoding, key=key, headers=headers, timestamp_ms=1234, offset=17)
    return tailed_record(3, rec, IsolationContext("test", "eu-1", "feat-a"))


def test_render_message_json_bytes_and_keys() -> None:
    m = render_message("q", _tailed(b'{"a":[1,2]}', VALUE_JSON, b"k1", (("h", b"v"),)), 5, 2)
    assert m == {
        "id": "3-17", "queue": "q", "key": "k1", "value": {"a": [1, 2]}, "headers": {"h": "v"}, "lane": "feat-a",
        "env": "test", "set": "eu-1", "partition": 3, "offset": 17, "virtual_partition": 5, "timestamp_ms": 1234,
        "delivery_count": 2,
    }
    raw = render_message("q", _tailed(b"\x00\x01", VALUE_RAW, None), 0, 1)
    assert base64.b64decode(raw["value_b64"]) == b"\x00\x01" and "value" not in raw and raw["key"] is None
    odd = render_message("q", _tailed(b"1", VALUE_JSON, b"\xff\xfe"), 0, 1)
    assert odd["key"] == "\ufffd\ufffd" and base64.b64decode(odd["key_b64"]) == b"\xff\xfe" and odd["value"] == 1


def test_renderer_bytes_are_render_message() -> None:
    renderer = MessageRenderer('q"\u00e9')
    cases = [
        _tailed(b'{"a":[1,2]}', VALUE_JSON, b"k1", (("h", b"v"),)),
        _tailed(b'"x\\u00e9 \xc3\xa9"', VALUE_JSON, "cl\u00e9".encode(), ((":dedup", b"d1"),)),
        _tailed(b" [1, 2.5e3, null] ", VALUE_JSON, None, ((":priority", b"3"), ("x", b"\xff"), (":dedup", b"d"))),
        _tailed(b"\x00\x01", VALUE_RAW, None),
        _tailed(b"1", VALUE_JSON, b"\xff\xfe"),
        _tailed(b"{not json", VALUE_JSON, b"k"),
        _tailed(b"[1]", VALUE_JSON, b"k", ((":dedup", b"only reserved"),)),
    ]
    rendered = [renderer.render(t, 7, 3) for t in cases]
    for t, got in zip(cases, rendered):
        assert orjson.loads(got) == render_message('q"\u00e9', t, 7, 3)
        assert list(orjson.loads(got)) == list(render_message('q"\u00e9', t, 7, 3))  # same fields, same order
        assert renderer.render(t, 7, 3) == got  # again, with its key's JSON remembered
    assert orjson.loads(poll_body(rendered)) == {"messages": [orjson.loads(m) for m in rendered]}
    assert orjson.loads(poll_body([])) == {"messages": []}
    for k in (1, 2):
        assert orjson.loads(poll_body(rendered[:k])) == {"messages": [orjson.loads(m) for m in rendered[:k]]}


def test_dlq_names_fit_the_name_limit() -> None:
    assert dlq_name("orders", "billing") == "orders.billing.dlq"
    long = dlq_name("q" * 128, "g" * 128)
    assert len(long) <= 128 and long.endswith(".dlq") and long == dlq_name("q" * 128, "g" * 128)
    assert pack_ref(5, 2**32 - 1) > 0 and unpack_ref(pack_ref(5, 123)) == (5, 123)


# --------------------------------------------------------------------- ingestor
class _Tailer:
    def __init__(self, pp: int) -> None:
        self.pp = pp
        self.index = QueueIndex()
        self.log_start = 0
        self.positions: dict[object, int] = {}
        self.scanned: dict[object, int | None] = {}

    def covers(self, offset: int) -> bool:
        return self.index.start_offset(self.pp) <= offset

    def require(self, offset: int) -> None:
        raise AssertionError("not expected")

    def set_position(self, key: object, offset: int, scanned_to: int | None = None) -> None:
        self.positions[key] = offset
        self.scanned[key] = scanned_to


class _Source:
    def __init__(self) -> None:
        self.records: dict[tuple[int, int], TailedRecord] = {}

    def cached(self, pp: int, offset: int) -> TailedRecord | None:
        return self.records.get((pp, offset))

    async def get(self, pp: int, offset: int) -> TailedRecord | None:
        return self.records.get((pp, offset))


class _Pool:
    def __init__(self, pps: list[int]) -> None:
        self.tailers = {pp: _Tailer(pp) for pp in pps}
        self.source = _Source()

    def get(self, pp: int) -> _Tailer | None:
        return self.tailers.get(pp)

    def subscribe(self, pp: int, key: object, listener: object, offset: int) -> _Tailer:
        return self.tailers[pp]

    async def unsubscribe(self, pp: int, key: object) -> None:
        return None

    def add(self, pp: int, offset: int, queue_id: int, key: bytes, key_hash: int) -> None:
        ctx = IsolationContext()
        self.tailers[pp].index.add(pp, offset, queue_id, pack_ref(1, key_hash), 1)
        rec = Record(value=b"1", queue_id=queue_id, key=key, key_hash=key_hash, offset=offset, timestamp_ms=1)
        self.source.records[(pp, offset)] = tailed_record(pp, rec, ctx)


async def test_ingestor_follows_lineage_order_and_back_pressure() -> None:
    pool = _Pool([0, 1])
    for off in range(3):  # the old range: pp 1 offsets 0..2; other queues' records in between are skipped
        pool.add(1, off * 2, 7, b"k", 0)
        pool.add(1, off * 2 + 1, 8, b"x", 0)
    for off in range(10, 13):  # the new range on pp 0
        pool.add(0, off, 7, b"k", 0)
    delivery = GroupDelivery(DeliveryConfig(virtual_partitions=1, max_unacked=4))
    ing = Ingestor(7, delivery, pool, "g", lambda pp: None)  # type: ignore[arg-type]
    ing.add_pp(0, 10)
    ing.add_pp(1, 0)
    ing.set_lineage(LineageOrder({0: [R(1, 0, 6), R(0, 10, None)]}), 0)
    res = await ing.step(0)
    assert res.nobody and res.ingested == 0  # no consumer may take the context yet: left in the log
    delivery.join("c", IsolationContext(), [0], 0)
    res = await ing.step(0)
    # pp 0 is scanned first but held until pp 1's range is done; then back-pressure at 4 ready
    assert res.ingested == 4
    order = []
    for _ in range(6):
        got = delivery.poll("c", 10, 1)
        order += [(d.pp, d.offset) for d in got]
        delivery.ack("c", [d.message_id for d in got])
        await ing.step(1)
    assert order == [(1, 0), (1, 2), (1, 4), (0, 10), (0, 11), (0, 12)]
    assert ing.cursors == {stream_of(0, 1): 13, stream_of(1, 1): 6}
    assert pool.tailers[0].positions["g"] == 13


async def test_ingestor_step_stops_at_its_budget_and_resumes() -> None:
    pool = _Pool([0, 1])
    for off in range(10):
        pool.add(0, off, 7, f"a{off}".encode(), 2 * off)  # vp 0 lives in pp 0
        pool.add(1, off, 7, f"b{off}".encode(), 2 * off + 1)  # vp 1 in pp 1
    delivery = GroupDelivery(DeliveryConfig(virtual_partitions=2))
    delivery.join("c", IsolationContext(), [0, 1], 0)
    ing = Ingestor(7, delivery, pool, "g", lambda pp: None, batch=4)  # type: ignore[arg-type]
    ing.add_pp(0, 0)
    ing.add_pp(1, 0)
    ing.set_lineage(LineageOrder({0: [R(0, 0, None)], 1: [R(1, 0, None)]}), 0)
    steps = []
    while True:
        res = await ing.step(0, budget=4)
        steps.append(res.ingested)
        if not res.more:
            break
        assert res.moved and res.ingested >= 4  # checked after each pp: at most budget + batch - 1
    assert sum(steps) == 20 and len(steps) > 1
    assert ing.cursors == {stream_of(0, 1): 10, stream_of(1, 1): 10}
    assert delivery.outstanding() == 20
    assert (await ing.step(0)).ingested == 0  # unbounded step: nothing left


async def test_ingestor_holds_records_outside_the_lineage_until_reload_or_grace() -> None:
    pool = _Pool([0])
    pool.add(0, 5, 7, b"k", 0)
    delivery = GroupDelivery(DeliveryConfig(virtual_partitions=1))
    delivery.join("c", IsolationContext(), [0], 0)
    ing = Ingestor(7, delivery, pool, "g", lambda pp: None, unknown_grace_ms=1000)  # type: ignore[arg-type]
    ing.add_pp(0, 0)
    ing.set_lineage(LineageOrder({0: [R(1, 0, None)]}), 0)
    res = await ing.step(10)
    assert res.unknown and res.ingested == 0 and ing.cursors[stream_of(0, 1)] == 0
    # the reloaded lineage knows the record
    ing.set_lineage(LineageOrder({0: [R(1, 0, 3), R(0, 5, None)]}), 20)
    assert (await ing.step(20)).ingested == 0  # held: pp 1 not read up to 3
    ing.set_lineage(LineageOrder({0: [R(1, 0, None)]}), 30)  # a wrong lineage: the grace period frees it
    assert (await ing.step(500)).ingested == 0
    ing.set_lineage(LineageOrder({0: [R(1, 0, None)]}), 600)
    assert (await ing.step(1100)).ingested == 1


async def test_backlog_by_context_and_vp_is_exact_then_estimated_from_a_sample() -> None:
    pool = _Pool([0])
    index = pool.tailers[0].index
    for off in range(100):
        ctx = 1 if off % 4 else 2
        index.add(0, off, 7, pack_ref(ctx, off), ctx)  # key hash = offset: vp = offset % 2
    index.add(0, 100, 8, pack_ref(3, 0), 3)  # another queue
    delivery = GroupDelivery(DeliveryConfig(virtual_partitions=2))
    ing = Ingestor(7, delivery, pool, "g", lambda pp: None)  # type: ignore[arg-type]
    ing.add_pp(0, 20)
    assert ing.backlog() == {(1, 0): 20, (1, 1): 40, (2, 0): 20}
    estimate = ing.backlog(sample=4)  # context 1 from offset 20: 21, 22, 23, 25 (vps 1, 0, 1, 1)
    assert sum(estimate.values()) == 80 and estimate[(2, 0)] == 20
    assert estimate[(1, 0)] == 15 and estimate[(1, 1)] == 45
