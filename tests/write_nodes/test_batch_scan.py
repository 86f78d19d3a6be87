"""``write_nodes.batch_scan.summarize_batch`` against ``BatchView.records()``: the same
summary for every valid batch, and a ``CorruptBatchError`` for exactly the record areas
``records()`` refuses."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import HEADER_SIZE, BatchView, Record, build_batch
from vpq.write_nodes.batch_scan import summarize_batch

records = st.builds(
    Record,
    value=st.binary(max_size=300),
    queue_id=st.integers(0, 2**32 - 1),
    virtual_partition=st.integers(0, 64),
    key_hash=st.integers(0, 2**32 - 1),
    context_id=st.integers(0, 3),
    value_encoding=st.integers(0, 1),
    key=st.one_of(st.none(), st.binary(max_size=200)),
    headers=st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=8)), max_size=3).map(tuple),
    timestamp_ms=st.one_of(st.none(), st.integers(0, 2**40)),
)


def by_records(view: BatchView) -> dict[tuple[int, int, int], list[int]]:
    out: dict[tuple[int, int, int], list[int]] = {}
    for r in view.records():
        c = out.setdefault((r.queue_id, r.virtual_partition, r.context_id), [0, 0])
        c[0] += 1
        c[1] += len(r.value)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(records, min_size=1, max_size=20), st.integers(0, 2**40))
def test_the_summary_is_what_the_decoded_records_give(rs: list[Record], ts: int) -> None:
    view = BatchView(build_batch(0, rs, ts), 0)
    assert summarize_batch(view) == by_records(view)
    assert list(summarize_batch(view)) == list(by_records(view))  # first-seen order too


@settings(max_examples=400, deadline=None)
@given(st.lists(records, min_size=1, max_size=6), st.data())
def test_a_damaged_record_area_is_refused_exactly_when_records_refuses_it(rs: list[Record], data: st.DataObject) -> None:
    batch = bytearray(build_batch(0, rs, 1_000))
    for _ in range(data.draw(st.integers(1, 3))):  # damage the record area only: the header must parse
        pos = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
        batch[pos] = data.draw(st.integers(0, 255))
    view = BatchView(bytes(batch), 0)
    try:
        expected = by_records(view)
    except CorruptBatchError:
        expected = None
    try:
        got = summarize_batch(view)
    except CorruptBatchError:
        got = None
    assert (got is None) == (expected is None)
    if expected is not None:
        assert got == expected
