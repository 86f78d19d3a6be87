"""Varints: known encodings, round trips, malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.codec.errors import CorruptBatchError
from vpq.codec.varint import (
    decode_svarint,
    decode_uvarint,
    encode_svarint,
    encode_uvarint,
    unzigzag,
    zigzag,
)


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"), (16384, b"\x80\x80\x01")],
)
def test_known_uvarints(value: int, encoded: bytes) -> None:
    assert encode_uvarint(value) == encoded
    assert decode_uvarint(encoded, 0, len(encoded)) == (value, len(encoded))


@pytest.mark.parametrize(("value", "mapped"), [(0, 0), (-1, 1), (1, 2), (-2, 3), (2, 4), (-(1 << 63), (1 << 64) - 1)])
def test_zigzag(value: int, mapped: int) -> None:
    assert zigzag(value) == mapped
    assert unzigzag(mapped) == value


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=(1 << 64) - 1), st.binary(max_size=4))
def test_uvarint_round_trip(value: int, suffix: bytes) -> None:
    buf = encode_uvarint(value) + suffix
    assert decode_uvarint(buf, 0, len(buf)) == (value, len(buf) - len(suffix))


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_svarint_round_trip(value: int) -> None:
    buf = b"\xaa" + encode_svarint(value)
    assert decode_svarint(buf, 1, len(buf)) == (value, len(buf))


def test_out_of_range_values_are_rejected() -> None:
    with pytest.raises(ValueError):
        encode_uvarint(-1)
    with pytest.raises(ValueError):
        encode_uvarint(1 << 64)
    with pytest.raises(ValueError):
        encode_svarint(1 << 63)


def test_truncated_and_overlong_varints_are_corrupt() -> None:
    with pytest.raises(CorruptBatchError):
        decode_uvarint(b"\x80\x80", 0, 2)
    with pytest.raises(CorruptBatchError):
        decode_uvarint(b"", 0, 0)
    with pytest.raises(CorruptBatchError):
        decode_uvarint(b"\xff" * 11 + b"\x01", 0, 12)
    with pytest.raises(CorruptBatchError):  # the end bound is respected even if more bytes exist
        decode_uvarint(b"\x80\x01", 0, 1)
