"""Sparse offset and time indexes: lookups, serialization, sanity checks."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.write_nodes.offset_index import CorruptIndexError, OffsetIndex
from vpq.write_nodes.time_index import TimeIndex


def test_offset_index_floor_lookup() -> None:
    idx = OffsetIndex(100)
    assert idx.lookup(150) == (100, 0)
    idx.append(110, 4096)
    idx.append(130, 9000)
    assert idx.lookup(100) == (100, 0)
    assert idx.lookup(109) == (100, 0)
    assert idx.lookup(110) == (110, 4096)
    assert idx.lookup(129) == (110, 4096)
    assert idx.lookup(10**9) == (130, 9000)
    assert idx.last_entry() == (130, 9000)


def test_offset_index_rejects_non_increasing_entries() -> None:
    idx = OffsetIndex(0)
    idx.append(5, 100)
    with pytest.raises(ValueError):
        idx.append(5, 200)
    with pytest.raises(ValueError):
        idx.append(6, 100)
    with pytest.raises(ValueError):
        OffsetIndex(10).append(9, 1)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 1000), st.integers(1, 1000)), max_size=30), st.integers(0, 1 << 40))
def test_offset_index_bytes_round_trip(steps: list[tuple[int, int]], base: int) -> None:
    idx = OffsetIndex(base)
    offset, pos = base, 0
    for d_off, d_pos in steps:
        offset += d_off
        pos += d_pos
        idx.append(offset, pos)
    again = OffsetIndex.from_bytes(base, idx.to_bytes(), pos + 1)
    assert again.entries() == idx.entries()


def test_offset_index_sanity_checks() -> None:
    idx = OffsetIndex(0)
    idx.append(3, 100)
    idx.append(7, 200)
    data = idx.to_bytes()
    with pytest.raises(CorruptIndexError):
        OffsetIndex.from_bytes(0, data[:-1], 1000)  # partial entry
    with pytest.raises(CorruptIndexError):
        OffsetIndex.from_bytes(0, data, 150)  # position beyond the segment
    with pytest.raises(CorruptIndexError):
        OffsetIndex.from_bytes(0, data[8:] + data[:8], 1000)  # not increasing


def test_time_index_scan_start_and_round_trip() -> None:
    t = TimeIndex(50)
    assert t.scan_start(123) == 50
    assert t.maybe_append(1000, 50)
    assert not t.maybe_append(999, 60)  # timestamps only grow
    assert t.maybe_append(2000, 70)
    assert t.maybe_append(3000, 90)
    assert t.max_timestamp == 3000
    assert t.scan_start(1000) == 50  # no entry strictly older than 1000
    assert t.scan_start(1001) == 50
    assert t.scan_start(2500) == 70
    assert t.scan_start(10**12) == 90
    again = TimeIndex.from_bytes(50, t.to_bytes(), 91)
    assert again.entries() == t.entries()
    with pytest.raises(CorruptIndexError):
        TimeIndex.from_bytes(50, t.to_bytes(), 90)  # offset beyond the segment end
    with pytest.raises(CorruptIndexError):
        TimeIndex.from_bytes(50, t.to_bytes()[:-3], 91)
