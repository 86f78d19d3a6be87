"""Record-batch format: golden bytes, round trips, CRC coverage, malformed input."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.codec.format1 import build_batch
from tests.codec.golden import (
    GOLDEN_BASE_OFFSET,
    GOLDEN_RECORDS,
    GOLDEN_TIMESTAMP_MS,
    golden_bytes,
)
from vpq.codec.batch_common import VALUE_JSON, VALUE_RAW
from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import (
    HEADER_SIZE,
    MAGIC,
    BatchView,
    Record,
    decode_batches,
    iter_batches,
    restamp_base_offset,
    restamp_base_offset_into,
)

U32 = st.integers(min_value=0, max_value=0xFFFFFFFF)
TS = st.integers(min_value=0, max_value=1 << 45)

records_st = st.builds(
    Record,
    value=st.binary(max_size=300),
    queue_id=U32,
    virtual_partition=U32,
    key_hash=U32,
    context_id=U32,
    value_encoding=st.sampled_from([VALUE_JSON, VALUE_RAW]),
    key=st.none() | st.binary(max_size=40),
    headers=st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=20)), max_size=3).map(tuple),
    timestamp_ms=st.none() | TS,
)


def _expected(base: int, records: list[Record], ts: int) -> list[Record]:
    out = []
    for i, r in enumerate(records):
        out.append(
            Record(
                value=r.value,
                queue_id=r.queue_id,
                virtual_partition=r.virtual_partition,
                key_hash=r.key_hash,
                context_id=r.context_id,
                value_encoding=r.value_encoding,
                key=r.key,
                headers=r.headers,
                timestamp_ms=ts if r.timestamp_ms is None else r.timestamp_ms,
                offset=base + i,
            )
        )
    return out


def test_golden_batch_bytes_never_change() -> None:
    assert build_batch(GOLDEN_BASE_OFFSET, GOLDEN_RECORDS, GOLDEN_TIMESTAMP_MS) == golden_bytes()


def test_golden_batch_decodes() -> None:
    view = BatchView(golden_bytes())
    assert (view.base_offset, view.last_offset, view.record_count, view.magic) == (1234, 1236, 3, MAGIC)
    assert view.first_ts == 1_700_000_000_123
    assert view.max_ts == 1_700_000_000_123
    assert view.size == len(golden_bytes())
    assert view.verify_crc()
    assert view.records() == _expected(GOLDEN_BASE_OFFSET, GOLDEN_RECORDS, GOLDEN_TIMESTAMP_MS)


@settings(max_examples=150, deadline=None)
@given(st.lists(records_st, min_size=1, max_size=8), st.integers(min_value=0, max_value=1 << 50), TS)
def test_round_trip(records: list[Record], base: int, ts: int) -> None:
    batch = build_batch(base, records, ts)
    (view,) = list(iter_batches(batch, verify=True))
    assert view.base_offset == base
    assert view.last_offset == base + len(records) - 1
    assert view.record_count == len(records)
    decoded = view.records()
    assert decoded == _expected(base, records, ts)
    assert view.max_ts == max(r.timestamp_ms for r in decoded)
    assert view.first_ts == decoded[0].timestamp_ms


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(records_st, min_size=1, max_size=4), min_size=1, max_size=5), TS)
def test_concatenated_batches(batches: list[list[Record]], ts: int) -> None:
    buf = b""
    expected: list[Record] = []
    offset = 10
    for recs in batches:
        buf += build_batch(offset, recs, ts)
        expected += _expected(offset, recs, ts)
        offset += len(recs)
    assert decode_batches(buf) == expected


@settings(max_examples=50, deadline=None)
@given(st.lists(records_st, min_size=1, max_size=4), st.integers(min_value=0, max_value=1 << 60))
def test_restamp_keeps_crc(records: list[Record], new_base: int) -> None:
    batch = build_batch(0, records, 1000)
    moved = restamp_base_offset(batch, new_base)
    view = BatchView(moved)
    assert view.base_offset == new_base
    assert view.verify_crc()
    assert [r.offset for r in view.records()] == list(range(new_base, new_base + len(records)))
    buf = bytearray(b"xx" + batch)
    restamp_base_offset_into(buf, 2, new_base)
    assert bytes(buf[2:]) == moved


def test_every_single_byte_flip_is_detected() -> None:
    batch = golden_bytes()
    for pos in range(len(batch)):
        damaged = bytearray(batch)
        damaged[pos] ^= 0x5A
        if pos < 8:  # the base offset is outside the CRC: the log checks continuity instead
            assert BatchView(bytes(damaged)).base_offset != GOLDEN_BASE_OFFSET
            continue
        with pytest.raises(CorruptBatchError):
            list(iter_batches(bytes(damaged), verify=True))


def test_truncated_batches_are_rejected() -> None:
    batch = golden_bytes()
    for cut in (1, HEADER_SIZE - 1, HEADER_SIZE, len(batch) - 1):
        with pytest.raises(CorruptBatchError):
            list(iter_batches(batch[:cut]))


def test_corrupt_record_area_is_reported() -> None:
    rng = random.Random(7)
    batch = golden_bytes()
    failures = 0
    for _ in range(200):
        damaged = bytearray(batch)
        damaged[rng.randrange(HEADER_SIZE, len(batch))] = rng.randrange(256)
        try:
            BatchView(bytes(damaged)).records()
        except CorruptBatchError:
            failures += 1
    assert failures > 0  # some layouts break; the CRC catches the rest (test above)


@pytest.mark.parametrize(
    "bad",
    [
        Record(value=b"x", queue_id=1 << 32),
        Record(value=b"x", virtual_partition=-1),
        Record(value=b"x", value_encoding=256),
        Record(value=b"x", timestamp_ms=1 << 63),
    ],
)
def test_out_of_range_fields_raise_value_error(bad: Record) -> None:
    with pytest.raises(ValueError):
        build_batch(0, [bad], 0)


def test_empty_batch_is_rejected() -> None:
    with pytest.raises(ValueError):
        build_batch(0, [], 0)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(records_st, min_size=1, max_size=4),
    st.lists(st.tuples(st.integers(min_value=0), st.integers(0, 255)), min_size=1, max_size=4),
)
def test_damaged_batches_only_ever_raise_corrupt_batch_error(
    records: list[Record], damage: list[tuple[int, int]]
) -> None:
    data = bytearray(build_batch(5, records, 1000))
    for where, byte in damage:
        data[where % len(data)] = byte
    try:
        for view in iter_batches(bytes(data)):
            view.records()  # decoding without the CRC check must fail cleanly or succeed
    except CorruptBatchError:
        pass
