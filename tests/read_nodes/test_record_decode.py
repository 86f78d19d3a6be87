"""``read_nodes.record_decode``: the column-at-a-time decode gives exactly the records
(and cache sizes) that decoding record by record gives, in both batch magics; it asks
for the contexts it does not know and refuses damaged header blocks."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.codec.format1 import build_batch
from tests.codec.test_columnar import _rebuild
from tests.codec.test_columnar import records_st as codec_records_st
from tests.needs import missing
from vpq.codec.columnar import LONE_DEDUP, build_columnar_batch, columns_of
from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import HEADER_SIZE, BatchView, Record
from vpq.codec.system_headers import DEDUP
from vpq.isolation.context import IsolationContext
from vpq.read_nodes import record_decode
from vpq.read_nodes.messages import RECORD_OVERHEAD_BYTES, TailedRecord, record_size, tailed_record
from vpq.read_nodes.record_decode import COLUMNS_FROM, UnknownContexts, decode_tailed

CONTEXTS = {c: IsolationContext("prod" if c == 0 else f"e{c}", "", "") for c in range(4)}

headers_st = st.one_of(
    st.just(()),
    st.tuples(st.tuples(st.just(DEDUP), st.binary(max_size=20) | st.binary(min_size=127, max_size=140))),
    st.lists(
        st.tuples(st.sampled_from([DEDUP, ":delay", "trace", "é"]) | st.text(max_size=8), st.binary(max_size=12)),
        max_size=3,
    ).map(tuple),
)
records_st = st.tuples(codec_records_st, headers_st).map(
    lambda pair: replace(pair[0], context_id=pair[0].context_id % len(CONTEXTS), headers=pair[1])
)


def by_record(view: BatchView, pp: int) -> list:
    return [tailed_record(pp, r, CONTEXTS[r.context_id]) for r in view.records(drop_dedup=True)]


@settings(max_examples=300, deadline=None)
@given(st.lists(records_st, min_size=1, max_size=20), st.integers(0, 1 << 50), st.integers(0, 1 << 45))
def test_the_same_records_and_sizes_as_one_record_at_a_time(records: list[Record], base: int, ts: int) -> None:
    for batch in (build_columnar_batch(base, ts, columns_of(records, ts)), build_batch(base, records, ts)):
        view = BatchView(batch)
        got, sizes = decode_tailed(view, 5, CONTEXTS)
        assert got == by_record(view, 5)
        assert all(type(t.value) is bytes and (t.key is None or type(t.key) is bytes) for t in got)
        assert sizes == [record_size(t) for t in got]


def test_a_buffer_that_is_not_bytes_gives_bytes() -> None:
    records = [Record(value=b"v%d" % i, key=None if i % 2 else b"k") for i in range(COLUMNS_FROM)]
    batch = build_columnar_batch(7, 1_000, columns_of(records, 1_000))
    view = BatchView(memoryview(bytearray(batch)))
    got, _ = decode_tailed(view, 0, CONTEXTS)
    assert [(t.offset, t.key, t.value) for t in got[:2]] == [(7, b"k", b"v0"), (8, None, b"v1")]
    assert all(type(t.value) is bytes for t in got) and got == by_record(BatchView(batch), 0)


@pytest.mark.parametrize("count", [1, COLUMNS_FROM])
def test_unknown_contexts_are_named(count: int) -> None:
    records = [Record(value=b"a", context_id=9), Record(value=b"b", context_id=8)]
    records += [Record(value=b"c", context_id=0)] * (count - 1)
    batch = build_columnar_batch(0, 1_000, columns_of(records, 1_000))
    for view in (BatchView(batch), BatchView(build_batch(0, records, 1_000))):
        with pytest.raises(UnknownContexts) as info:
            decode_tailed(view, 0, CONTEXTS)
        assert info.value.ids == {8, 9}


@pytest.mark.parametrize("count", [2, COLUMNS_FROM])
@pytest.mark.parametrize("block", [b"\x01\x06:dedup\x05abc", b"\x02\x01h\x01v", b"\x01\x02\xff\xfe\x00"])
def test_a_damaged_header_block_is_refused(block: bytes, count: int) -> None:
    records = [Record(value=b"x", key=b"k")] * count
    batch = build_columnar_batch(0, 1_000, columns_of(records, 1_000))
    body = bytearray(batch[HEADER_SIZE:])
    struct.pack_into("<I", body, 4 * 4 * count + 8 * count + 8 * count, len(block))  # record 0's headers length
    view = BatchView(_rebuild(batch, bytes(body + block)))
    with pytest.raises(CorruptBatchError):
        decode_tailed(view, 0, CONTEXTS)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=140), min_size=COLUMNS_FROM, max_size=20), st.booleans())
def test_a_batch_of_dedup_ids_alone(ids: list[bytes], one_other: bool) -> None:
    """The column-at-a-time check of a batch whose every record carries its dedup id
    alone (the SDK's usual batch), ids of any length; one record with another header
    among them turns it off."""
    records = [Record(value=b"v%d" % i, key=b"k", headers=((DEDUP, dedup_id),)) for i, dedup_id in enumerate(ids)]
    if one_other:
        records[len(records) // 2] = Record(value=b"o", headers=((DEDUP, b"x"), ("trace", b"t")))
    view = BatchView(build_columnar_batch(0, 1_000, columns_of(records, 1_000)))
    got, sizes = decode_tailed(view, 0, CONTEXTS)
    assert got == by_record(view, 0)
    assert sizes == [record_size(t) for t in got]
    assert [t.headers for t in got] == [((DEDUP, b"x"), ("trace", b"t")) if r.value == b"o" else () for r in records]


def test_a_batch_of_dedup_ids_with_one_damaged_block_is_refused() -> None:
    records = [Record(value=b"a", headers=((DEDUP, b"abc"),))] * (COLUMNS_FROM - 1)
    records.append(Record(value=b"b", headers=((DEDUP, b"abd"),)))
    batch = bytearray(build_columnar_batch(0, 1_000, columns_of(records, 1_000)))
    block = b"\x01\x06:dedup\x03abd"
    at = batch.rindex(block)
    batch[at + 8] = 2  # the second id's length now leaves a byte over
    view = BatchView(_rebuild(bytes(batch), bytes(batch[HEADER_SIZE:])))
    with pytest.raises(CorruptBatchError):
        decode_tailed(view, 0, CONTEXTS)


def _python_columns(view: BatchView, pp: int) -> tuple[list, list]:
    """``decode_tailed`` with the C extension turned off."""
    saved = record_decode._decode_columnar  # noqa: SLF001
    record_decode._decode_columnar = None  # noqa: SLF001
    try:
        return decode_tailed(view, pp, CONTEXTS)
    finally:
        record_decode._decode_columnar = saved  # noqa: SLF001


def test_the_c_extension_is_built() -> None:
    if record_decode._decode_columnar is None:  # noqa: SLF001
        missing("the C extension vpq.read_nodes._fast_decode is not built (pip install -e . with a C compiler)")
    records = [Record(value=b"v%d" % i, key=b"k", headers=((DEDUP, b"id%d" % i),)) for i in range(COLUMNS_FROM)]
    batch = build_columnar_batch(3, 1_000, columns_of(records, 1_000))
    got = record_decode._decode_columnar(  # noqa: SLF001
        batch, 0, len(batch), COLUMNS_FROM, 3, 1_000, 0, CONTEXTS, TailedRecord, LONE_DEDUP, RECORD_OVERHEAD_BYTES
    )
    assert got is not None and got == _python_columns(BatchView(batch), 0)
    assert all(type(t) is TailedRecord for t in got[0])


@settings(max_examples=300, deadline=None)
@given(st.lists(records_st, min_size=COLUMNS_FROM, max_size=20), st.integers(0, 1 << 50), st.integers(0, 1 << 45),
       st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), max_size=3))
def test_c_and_python_agree_on_any_bytes(records: list[Record], base: int, ts: int, flips: list) -> None:
    """Whatever the record area holds (bytes changed at random, the header left valid),
    the C decoder and the Python columns give the same records, or the same error."""
    batch = build_columnar_batch(base, ts, columns_of(records, ts))
    body = bytearray(batch[HEADER_SIZE:])
    for at, byte in flips:
        body[at % len(body)] = byte
    view = BatchView(_rebuild(batch, bytes(body)))
    outcomes = []
    for decode in (lambda: decode_tailed(view, 5, CONTEXTS), lambda: _python_columns(view, 5)):
        try:
            outcomes.append(decode())
        except (CorruptBatchError, UnknownContexts) as exc:
            outcomes.append(type(exc))
    assert outcomes[0] == outcomes[1]
