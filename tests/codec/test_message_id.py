"""Message ids: canonical, round-trip, strict validation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.codec.message_id import (
    MAX_OFFSET,
    MAX_PP,
    MessageIdError,
    check_message_id,
    decode_message_id,
    decode_message_ids,
    encode_message_id,
)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, MAX_PP), st.integers(0, MAX_OFFSET))
def test_round_trip(pp: int, offset: int) -> None:
    mid = encode_message_id(pp, offset)
    assert decode_message_id(mid) == (pp, offset)


def test_examples() -> None:
    assert encode_message_id(0, 0) == "0-0"
    assert encode_message_id(3, 1234) == "3-1234"
    assert decode_message_id("4294967295-9223372036854775807") == (MAX_PP, MAX_OFFSET)


@pytest.mark.parametrize(
    "bad", ["", "0", "0-", "-0", "00-1", "0-01", "a-1", "1-f", " 1-1", "1-1 ", "1--1", "+1-1", "1-1-1", "4294967296-0",
            "0-9223372036854775808", "0-99999999999999999999", "1-\u0661", 5, None, b"0-0"],
)
def test_rejects_malformed(bad: object) -> None:
    with pytest.raises(MessageIdError) as e:
        decode_message_id(bad)
    assert "invalid message id" in str(e.value) and e.value.message_id == bad


def test_list_names_the_index() -> None:
    assert decode_message_ids(["1-2", "0-0"]) == [(1, 2), (0, 0)]
    with pytest.raises(MessageIdError, match="at index 1"):
        decode_message_ids(["1-2", "zz"])
    with pytest.raises(MessageIdError, match="list"):
        decode_message_ids("1-2")


@pytest.mark.parametrize("pp,offset", [(-1, 0), (0, -1), (MAX_PP + 1, 0), (0, MAX_OFFSET + 1), (True, 0)])
def test_encode_rejects_out_of_range(pp: int, offset: int) -> None:
    with pytest.raises(ValueError):
        encode_message_id(pp, offset)


@pytest.mark.parametrize("good", ["0-0", "3-1234", "4294967295-9223372036854775807", "999999999-1"])
def test_check_message_id_answers_a_canonical_id_itself(good: str) -> None:
    assert check_message_id(good) == good


@pytest.mark.parametrize("bad", ["", "01-1", "1-01", "-1", "4294967296-0", "0-9223372036854775808", "1-2-3", 7, None])
def test_check_message_id_rejects_what_decode_rejects(bad: object) -> None:
    with pytest.raises(MessageIdError):
        check_message_id(bad)


def test_decode_many_takes_the_checked_path_for_long_ids() -> None:
    assert decode_message_ids(["4294967295-9223372036854775807", "1-2"]) == [(MAX_PP, MAX_OFFSET), (1, 2)]
    with pytest.raises(MessageIdError, match="at index 1: partition or offset out of range"):
        decode_message_ids(["1-2", "4294967296-0"])
