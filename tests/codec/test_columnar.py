"""Record-batch format magic 2 (``codec.columnar``): golden bytes read by an
independent parser of the spec, the same records as magic 1 for every input, the same
summary as the decoded records, and a ``CorruptBatchError`` (never a wrong answer) for
damaged or inconsistent record areas."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.codec.format1 import build_batch
from tests.codec.golden import GOLDEN_BASE_OFFSET, GOLDEN_RECORDS, GOLDEN_TIMESTAMP_MS
from vpq.codec.columnar import (
    FIXED_RECORD_BYTES,
    MAGIC_COLUMNAR,
    ColumnarRecords,
    build_columnar_batch,
    build_columnar_buffer,
    columns_of,
    summarize,
)
from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import (
    HEADER,
    HEADER_SIZE,
    BatchView,
    Record,
    iter_batches,
    restamp_base_offset,
)
from vpq.codec.system_headers import DEDUP
from vpq.write_nodes.recovery import LogLoader

GOLDEN_V2 = Path(__file__).with_name("golden_batch_v2.hex")

records_st = st.builds(
    Record,
    value=st.binary(max_size=300),
    queue_id=st.integers(0, 2**32 - 1),
    virtual_partition=st.integers(0, 2**32 - 1),
    key_hash=st.integers(0, 2**32 - 1),
    context_id=st.integers(0, 2**32 - 1),
    value_encoding=st.integers(0, 1),
    key=st.none() | st.binary(max_size=40),
    # long names and values too: their lengths take two varint bytes (not the decoder's fast path)
    headers=st.lists(
        st.tuples(st.text(max_size=8) | st.text(min_size=128, max_size=130),
                  st.binary(max_size=12) | st.binary(min_size=127, max_size=140)),
        max_size=3,
    ).map(tuple),
    timestamp_ms=st.none() | st.integers(0, 1 << 45),
)


def golden_v2() -> bytes:
    return bytes.fromhex("".join(GOLDEN_V2.read_text().split()))


def build_v2(base: int, records: list[Record], ts: int) -> bytes:
    return build_columnar_batch(base, ts, columns_of(records, ts))


def parse_by_the_spec(batch: bytes) -> list[dict[str, object]]:
    """An independent reader written from the module docstring with ``struct`` only."""
    base, length, magic, _crc, _attrs, _last, first_ts, _max_ts, n = HEADER.unpack_from(batch, 0)
    assert magic == 2 and length + 12 == len(batch)
    p = HEADER_SIZE

    def col(fmt: str, size: int) -> list[int]:
        nonlocal p
        out = list(struct.unpack_from("<" + fmt * n, batch, p))
        p += size * n
        return out

    qids, vps, hashes, ctxs = col("I", 4), col("I", 4), col("I", 4), col("I", 4)
    deltas, kls, vls, hls = col("q", 8), col("i", 4), col("I", 4), col("I", 4)
    encs = list(batch[p : p + n])
    p += n
    keys = []
    for kl in kls:
        keys.append(None if kl == -1 else batch[p : p + kl])
        p += max(kl, 0)
    values = []
    for vl in vls:
        values.append(batch[p : p + vl])
        p += vl
    blocks = []
    for hl in hls:
        blocks.append(batch[p : p + hl])
        p += hl
    assert p == len(batch)
    return [
        {
            "offset": base + i, "queue_id": qids[i], "vp": vps[i], "key_hash": hashes[i], "context_id": ctxs[i],
            "ts": first_ts + deltas[i], "key": keys[i], "value": values[i], "encoding": encs[i], "headers": blocks[i],
        }  # fmt: skip
        for i in range(n)
    ]


def test_golden_v2_bytes_never_change() -> None:
    built = build_v2(GOLDEN_BASE_OFFSET, GOLDEN_RECORDS, GOLDEN_TIMESTAMP_MS)
    assert built == golden_v2()


def test_golden_v2_matches_the_spec_and_decodes_to_the_v1_records() -> None:
    batch = golden_v2()
    rows = parse_by_the_spec(batch)
    assert [r["queue_id"] for r in rows] == [7, 7, 0xFFFFFFFF]
    assert [r["key"] for r in rows] == [b"order-42", None, b""]
    assert [r["ts"] for r in rows] == [1_700_000_000_123, GOLDEN_TIMESTAMP_MS, 1_700_000_000_050]
    assert rows[0]["headers"] == b"\x02\x01h\x01v\x05trace\x02\x00\x01" and rows[1]["headers"] == b""
    view = BatchView(batch)
    assert view.magic == MAGIC_COLUMNAR and view.verify_crc()
    assert view.first_ts == 1_700_000_000_123  # the first record's, as in magic 1
    v1 = BatchView(build_batch(GOLDEN_BASE_OFFSET, GOLDEN_RECORDS, GOLDEN_TIMESTAMP_MS))
    assert view.records() == v1.records()
    assert (view.max_ts, view.record_count, view.last_offset) == (v1.max_ts, v1.record_count, v1.last_offset)


@settings(max_examples=200, deadline=None)
@given(st.lists(records_st, min_size=1, max_size=12), st.integers(0, 1 << 50), st.integers(0, 1 << 45))
def test_v2_decodes_to_exactly_the_records_v1_does(records: list[Record], base: int, ts: int) -> None:
    v2 = BatchView(build_v2(base, records, ts))
    v1 = BatchView(build_batch(base, records, ts))
    assert v2.verify_crc()
    assert v2.records() == v1.records()
    assert (v2.first_ts, v2.max_ts, v2.base_offset, v2.last_offset) == (v1.first_ts, v1.max_ts, v1.base_offset, v1.last_offset)
    assert [r["value"] for r in parse_by_the_spec(v2.raw())] == [r.value for r in records]


@settings(max_examples=200, deadline=None)
@given(st.lists(records_st, min_size=1, max_size=12), st.integers(0, 1 << 50), st.integers(0, 1 << 45))
def test_the_buffer_builder_gives_the_same_bytes(records: list[Record], base: int, ts: int) -> None:
    cols = columns_of(records, ts)
    buffer = build_columnar_buffer(base, ts, cols)
    assert isinstance(buffer, bytearray) and buffer == build_columnar_batch(base, ts, cols) == build_v2(base, records, ts)


dedup_headers_st = st.one_of(
    st.tuples(st.tuples(st.just(DEDUP), st.binary(max_size=20) | st.binary(min_size=127, max_size=140))),  # the id alone
    st.tuples(st.tuples(st.just(DEDUP), st.binary(max_size=8)), st.tuples(st.just("h"), st.binary(max_size=4))),
    st.tuples(st.tuples(st.just(DEDUP + "x"), st.binary(max_size=8))),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(records_st | st.builds(Record, value=st.binary(max_size=20), headers=dedup_headers_st), min_size=1,
                max_size=12), st.integers(0, 1 << 45))  # fmt: skip
def test_drop_dedup_leaves_out_a_lone_dedup_id_and_nothing_else(records: list[Record], ts: int) -> None:
    def without_lone_id(r: Record) -> Record:
        return replace(r, headers=()) if len(r.headers) == 1 and r.headers[0][0] == DEDUP else r

    for batch in (build_v2(0, records, ts), build_batch(0, records, ts)):
        view = BatchView(batch)
        assert view.records(drop_dedup=True) == [without_lone_id(r) for r in view.records()]


@pytest.mark.parametrize("block", [
    b"\x01\x06:dedup\x05abc",  # the id's length runs past the block
    b"\x01\x06:dedup\x81\x00",  # a two-byte varint length that the block does not hold
    b"\x01\x06:dedup\x01ab",  # a byte left over
])  # fmt: skip
def test_drop_dedup_still_refuses_a_damaged_header_block(block: bytes) -> None:
    n = 2
    batch = build_columnar_batch(0, 1_000, _cols(n))
    body = bytearray(batch[HEADER_SIZE:])
    struct.pack_into("<I", body, 4 * 4 * n + 8 * n + 8 * n, len(block))  # record 0's headers length
    view = BatchView(_rebuild(batch, bytes(body + block)))
    with pytest.raises(CorruptBatchError):
        view.records(drop_dedup=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(records_st, min_size=1, max_size=20), st.integers(0, 1 << 45))
def test_the_summary_is_what_the_decoded_records_give(records: list[Record], ts: int) -> None:
    view = BatchView(build_v2(0, records, ts))
    expected: dict[tuple[int, int, int], list[int]] = {}
    for r in view.records():
        c = expected.setdefault((r.queue_id, r.virtual_partition, r.context_id), [0, 0])
        c[0] += 1
        c[1] += len(r.value)
    assert summarize(view) == expected
    assert list(summarize(view)) == list(expected)  # first-seen order too


@settings(max_examples=300, deadline=None)
@given(st.lists(records_st, min_size=1, max_size=6), st.data())
def test_a_damaged_record_area_fails_the_crc_and_raises_nothing_but_corrupt_batch_errors(
    records: list[Record], data: st.DataObject
) -> None:
    good = build_v2(0, records, 1_000)
    batch = bytearray(good)
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(HEADER_SIZE, len(batch) - 1))
        batch[pos] = data.draw(st.integers(0, 255))
    if bytes(batch) == good:
        return
    view = BatchView(bytes(batch))
    assert not view.verify_crc()
    with pytest.raises(CorruptBatchError):
        list(iter_batches(bytes(batch), verify=True))
    # without the CRC, the structural checks refuse it or it decodes to as many records;
    # the write node's summary (its check of a frame) refuses exactly what decoding refuses
    try:
        summary = summarize(view)
    except CorruptBatchError:
        summary = None
    try:
        decoded = view.records()
    except CorruptBatchError:
        assert summary is None
        return
    assert summary is not None and sum(c[0] for c in summary.values()) == len(decoded)
    assert len(decoded) == len(records)
    assert sum(len(r.value) + len(r.key or b"") for r in decoded) <= len(batch)


def _rebuild(batch: bytes, body: bytes) -> bytes:
    """``batch``'s header over a new record area (length and CRC recomputed)."""
    from crc32c import crc32c

    head = bytearray(batch[:HEADER_SIZE])
    whole = head + body
    struct.pack_into(">i", whole, 8, len(whole) - 12)
    struct.pack_into(">I", whole, 13, crc32c(bytes(whole[17:])))
    return bytes(whole)


def _cols(n: int = 2) -> ColumnarRecords:
    return ColumnarRecords(
        queue_ids=[1] * n, vps=list(range(n)), key_hashes=[5] * n, context_ids=[0] * n,
        keys=[b"k%d" % i for i in range(n)], values=[b"v" * (i + 1) for i in range(n)], encodings=b"\x00" * n,
    )  # fmt: skip


@pytest.mark.parametrize(
    "damage",
    ["extra_byte", "missing_byte", "key_length_below_minus_one", "unknown_encoding", "empty_header_block", "header_overrun"],
)
def test_inconsistent_record_areas_with_a_valid_crc_are_refused(damage: str) -> None:
    n = 2
    batch = build_columnar_batch(0, 1_000, _cols(n))
    body = bytearray(batch[HEADER_SIZE:])
    kl_at = 4 * 4 * n + 8 * n  # key length column
    hl_at = kl_at + 8 * n  # headers length column
    enc_at = FIXED_RECORD_BYTES * n - n
    if damage == "extra_byte":
        body += b"x"
    elif damage == "missing_byte":
        del body[-1]
    elif damage == "key_length_below_minus_one":
        struct.pack_into("<i", body, kl_at, -2)
    elif damage == "unknown_encoding":
        body[enc_at] = 7
    elif damage == "empty_header_block":  # a block must hold >= 1 header: b"\x00" is not canonical
        struct.pack_into("<I", body, hl_at, 1)
        body += b"\x00"
    elif damage == "header_overrun":  # the block claims two headers but holds one
        block = b"\x02\x01h\x01v"
        struct.pack_into("<I", body, hl_at, len(block))
        body += block
    bad = _rebuild(batch, bytes(body))
    view = BatchView(bad)
    assert view.verify_crc()
    with pytest.raises(CorruptBatchError):
        view.records()
    with pytest.raises(CorruptBatchError):
        summarize(view)


def test_builder_refuses_bad_columns() -> None:
    cols = _cols(2)
    with pytest.raises(ValueError):
        build_columnar_batch(0, 0, cols._replace(values=[]))
    with pytest.raises(ValueError):
        build_columnar_batch(0, 0, cols._replace(vps=[1]))
    with pytest.raises(ValueError):
        build_columnar_batch(0, 0, cols._replace(queue_ids=[1, 2**32]))
    with pytest.raises(ValueError):
        build_columnar_batch(0, 0, cols._replace(encodings=[0, 300]))
    with pytest.raises(ValueError):
        build_columnar_batch(0, 0, cols, attributes=1)


def test_restamp_and_concatenation_keep_both_magics_readable() -> None:
    a = build_batch(0, [Record(value=b"one", key=b"k")], 5)
    b = restamp_base_offset(build_v2(0, [Record(value=b"two"), Record(value=b"three")], 6), 1)
    c = build_batch(3, [Record(value=b"four")], 7)
    values = [r.value for v in iter_batches(a + b + c, verify=True) for r in v.records()]
    assert values == [b"one", b"two", b"three", b"four"]
    assert [r.offset for r in BatchView(b).records()] == [1, 2]


def test_recovery_reads_a_segment_of_mixed_magics(tmp_path: Path) -> None:
    from vpq.write_nodes.filenames import log_file

    batches = [
        build_batch(0, [Record(value=b"a")], 1),
        build_v2(1, [Record(value=b"b"), Record(value=b"c", key=b"k")], 2),
        build_batch(3, [Record(value=b"d")], 3),
    ]
    data = b"".join(batches)
    log_file(tmp_path, 0).write_bytes(data + b"\x00\x01garbage")
    segments, report = LogLoader(tmp_path, 4096, 10).load()
    assert report.recovered_end_offset == 4
    assert report.bytes_truncated == len(b"\x00\x01garbage")
    seg = segments.active
    assert seg is not None and seg.size == len(data)
    for s in segments:
        s.close()
