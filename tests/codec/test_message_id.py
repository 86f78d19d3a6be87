"""Message ids: canonical, round-trip, strict validation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.codec.message_id import (
    MAX_OFFSET,
    MAX_PP,
    MessageIdError,
    all_short_ids,
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


_ids_or_not = st.one_of(
    st.builds(encode_message_id, st.integers(0, MAX_PP), st.integers(0, MAX_OFFSET)),
    st.sampled_from(["", "0-01", "1-1,2-2", "1-1 ", ",", "1-\u0661", "999999999-999999999999999999"]),
    st.text(alphabet="0123456789-,", max_size=12),
    st.integers(0, 5),
    st.none(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ids_or_not, max_size=8))
def test_all_short_ids_says_true_only_when_each_id_is_canonical(ids: list) -> None:
    def canonical(mid: object) -> bool:
        try:
            return check_message_id(mid) == mid
        except MessageIdError:
            return False

    if all_short_ids(ids):
        assert ids and all(canonical(mid) for mid in ids)
    elif ids and all(type(m) is str and len(m) <= 28 and canonical(m) for m in ids):
        # canonical ids of at most 9 + 18 digits are never refused
        assert any(len(m.partition("-")[0]) > 9 or len(m.partition("-")[2]) > 18 for m in ids)
    assert not all_short_ids(tuple(ids)) and not all_short_ids("1-1")
