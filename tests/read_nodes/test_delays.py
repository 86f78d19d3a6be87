"""Delayed messages and priority in the pure delivery core: the ``DelayIndex`` (one
packed int per pending message), ``GroupDelivery.defer``/``take_due`` and the ack
state a deferred message leaves behind (the model in ``delivery_model`` checks them
in random interleavings; these are the named cases)."""

from __future__ import annotations

import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.isolation.context import IsolationContext as Ctx
from vpq.read_nodes import delay_index
from vpq.read_nodes.ack_tracker import PartitionAckState
from vpq.read_nodes.delay_index import MAX_OFFSET, DelayIndex
from vpq.read_nodes.delivery import GroupDelivery
from vpq.read_nodes.delivery_types import DeliveryConfig, DeliveryEntry
from vpq.virtual_partitions.hashing import key_hash

PROD = Ctx()


def gd() -> GroupDelivery:
    g = GroupDelivery(DeliveryConfig(virtual_partitions=4, visibility_timeout_ms=1000, max_acked_above=None))
    g.join("a", PROD, range(4), 0)
    return g


def entry(offset: int, key: bytes | None = b"k", priority: int = 0, pp: int = 0) -> DeliveryEntry:
    h = key_hash(key) if key is not None else offset
    return DeliveryEntry(pp, offset, h, key, PROD, 1000 + offset, priority=priority)


def test_delay_index_takes_by_due_time_then_stream_then_offset() -> None:
    d = DelayIndex()
    assert d.add(1, 5, 300) and d.add(2, 1, 100) and d.add(1, 7, 100) and d.add(2, 9, 300)
    assert not d.add(1, 5, 300)  # held already
    assert len(d) == 4 and d.next_due() == 100 and d.next_due(skip=[1, 2]) is None
    assert d.take(99, 10) == []
    assert d.take(300, 3) == [(100, 1, 7), (100, 2, 1), (300, 1, 5)]
    assert d.take(300, 10, skip=[2]) == [] and len(d) == 1
    assert d.discard(2, 9, 300) and not d.discard(2, 9, 300) and len(d) == 0 and d.streams() == {}
    with pytest.raises(ValueError):
        d.add(1, MAX_OFFSET + 1, 0)
    with pytest.raises(ValueError):
        d.add(1, -1, 0)


def test_a_pending_delayed_message_costs_two_machine_words() -> None:
    d = DelayIndex()
    rng = random.Random(3)
    for off in range(20_000):
        d.add(off % 3, 10**9 + off, 1_795_000_000_000 + rng.randrange(10**6))
    held = sum(sys.getsizeof(a) for st in d._streams.values() for a in (*st.dues, *st.offs))  # noqa: SLF001
    assert held / len(d) < 24  # 16 bytes of payload, plus the arrays' headers and slack


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "take", "discard"]), st.integers(0, 2), st.integers(0, 3000),
                          st.integers(0, 50), st.integers(1, 700)), max_size=300))
def test_delay_index_matches_a_sorted_reference(ops: list[tuple[str, int, int, int, int]]) -> None:
    saved, delay_index.CHUNK = delay_index.CHUNK, 3  # tiny chunks: splits and empty chunks happen
    try:
        _check_against_reference(ops)
    finally:
        delay_index.CHUNK = saved


def _check_against_reference(ops: list[tuple[str, int, int, int, int]]) -> None:
    d = DelayIndex()
    ref: set[tuple[int, int, int]] = set()  # (due, stream, offset)
    for op, stream, offset, due, n in ops:
        if op == "add":
            assert d.add(stream, offset, due) == ((due, stream, offset) not in ref)
            ref.add((due, stream, offset))
        elif op == "discard":
            assert d.discard(stream, offset, due) == ((due, stream, offset) in ref)
            ref.discard((due, stream, offset))
        else:
            want = sorted(x for x in ref if x[0] <= due)[:n]
            assert d.take(due, n) == want
            ref.difference_update(want)
        assert len(d) == len(ref)
        assert d.next_due() == (min(ref)[0] if ref else None)


def test_delay_index_chunks_split_and_drain() -> None:
    d = DelayIndex()
    for off in range(5000):
        assert d.add(7, off, 10_000 - off // 3)
    assert len(d._streams[7].dues) > 2  # noqa: SLF001
    got = []
    while len(d):
        got += d.take(10_000, 333)
    assert got == sorted(got) and len(got) == 5000 and d.streams() == {}


def test_deferred_message_is_outstanding_but_not_held_and_joins_its_key_when_due() -> None:
    g = gd()
    assert g.defer(entry(0), 5000) is True
    assert g.defer(entry(0), 5000) is False
    g.ingest(entry(1))  # immediate, same key, logged after the delayed one
    g.mark_scanned(0, 2)
    assert g.delayed() == 1 and g.lag().total == 1
    st = g.compact_ack_state()[0]
    # not listed: the state names the stream's earliest deferred one, and holds the low watermark
    assert (st.pending_below, st.delayed, st.low_watermark) == ((1,), (0, 5000, 0), 0)
    (d,) = g.poll("a", 10, 0)
    assert d.message_id == "0-1"  # it does not wait for the delayed message
    assert g.take_due(4999) == [] and g.next_delayed_ms() == 5000
    assert g.take_due(5000) == [(5000, 0, 0)] and g.delayed() == 0
    assert g.ingest(entry(0)) is True  # the caller re-read it: it joins the key now
    g.ingest(entry(2))  # written after the delayed one came due: goes behind it
    assert g.poll("a", 10, 1) == []  # behind the run in flight
    assert g.ack("a", ["0-1"]) == 1
    assert [x.message_id for x in g.poll("a", 10, 2)] == ["0-0", "0-2"]


def test_defer_again_and_drop_deferred() -> None:
    g = gd()
    g.defer(entry(3, key=None), 10)
    due = g.take_due(100)
    g.defer_again(due)
    assert g.delayed() == 1 and g.take_due(100) == due
    g.drop_deferred(0, 3)  # the record is gone (retention): done
    g.mark_scanned(0, 4)
    assert g.low_watermark(0) == 4


def test_restore_rebuilds_nothing_by_itself_the_reader_defers_again() -> None:
    g = gd()
    g.defer(entry(0), 5000)
    g.ingest(entry(1, b"x"))
    g.mark_scanned(0, 2)
    assert g.ack("a", [d.message_id for d in g.poll("a", 10, 0)]) == 1
    state = g.compact_ack_state()
    g2 = GroupDelivery(g.config)
    g2.restore(state)
    assert g2.low_watermark(0) == 0  # a successor re-reads from the delayed message
    assert g2.ingest(entry(1, b"x")) is False  # acked: skipped
    assert g2.maybe_deferred(0, 0) and g2.defer(entry(0), 5000) is True  # still outstanding: deferred again


def test_a_restored_state_tells_done_from_pending_delayed_messages_by_due_time() -> None:
    """Many delayed messages, some came due and were acked, one came due and is in
    flight, the rest wait: the state lists only the one in flight, and a successor
    re-reading the log defers exactly the ones still waiting."""
    g = gd()
    dues = {off: 1000 + 100 * ((off * 7) % 10) for off in range(10)}  # due order differs from log order
    for off, due in dues.items():
        assert g.defer(entry(off, f"k{off}".encode()), due)
    g.mark_scanned(0, 10)
    taken = g.take_due(1400)
    assert [t[0] for t in taken] == sorted(dues[o] for o in range(10) if dues[o] <= 1400)
    for _due, _stream, off in taken:
        g.ingest(entry(off, f"k{off}".encode()))
    got = g.poll("a", 100, 0)
    in_flight = got[0].message_id
    g.ack("a", [d.message_id for d in got[1:]])
    st = PartitionAckState.from_json(g.compact_ack_state()[0].to_json())
    first = min((due, off) for off, due in dues.items() if due > 1400)
    assert st.pending_below == (int(in_flight.split("-")[1]),) and st.delayed == (min(
        off for off, due in dues.items() if due > 1400), *first)
    g2 = GroupDelivery(g.config)
    g2.restore({0: st})
    deferred = [off for off in range(10) if g2.defer(entry(off, f"k{off}".encode()), dues[off])]
    # the waiting ones, and the one in flight (listed), which is due at once; not the acked ones
    want = sorted([int(in_flight.split("-")[1])] + [off for off, due in dues.items() if due > 1400])
    assert deferred == want and g2.delayed() == len(want)
    assert [t[2] for t in g2.take_due(1400)] == [int(in_flight.split("-")[1])]


def test_priority_orders_ready_runs_but_never_a_key() -> None:
    g = gd()
    g.ingest(entry(0, b"k", priority=0))
    g.ingest(entry(1, b"k", priority=9))
    g.ingest(entry(2, b"lo", priority=1))
    g.ingest(entry(3, b"hi", priority=7))
    g.ingest(entry(4, None, priority=9))
    got = [x.message_id for x in g.poll("a", 10, 0)]
    assert got == ["0-4", "0-3", "0-2", "0-0", "0-1"]


def test_priority_is_validated() -> None:
    with pytest.raises(ValueError):
        entry(0, priority=10)
