"""Self-describing 1 KiB benchmark payloads."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.load.payload import MESSAGE_BYTES, KeySequencer, key_name, make_payload, parse_payload


@settings(max_examples=100, deadline=None)
@given(
    st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="|"), min_size=1, max_size=40),
    st.integers(0, 2**40),
    st.integers(0, 2**50),
)
def test_round_trip_and_size(key: str, seq: int, sched_us: int) -> None:
    payload = make_payload(key, seq, sched_us)
    assert len(payload) == MESSAGE_BYTES
    stamp = parse_payload(payload)
    assert (stamp.key, stamp.seq, stamp.sched_us) == (key, seq, sched_us)
    assert parse_payload(payload.decode("ascii")) == stamp


def test_bad_keys_and_sizes_are_refused() -> None:
    with pytest.raises(ValueError):
        make_payload("a|b", 0)
    with pytest.raises(ValueError):
        make_payload("ключ", 0)
    with pytest.raises(ValueError):
        make_payload("k", 0, size=4)
    with pytest.raises(ValueError):
        make_payload("k", -1)
    for junk in (b"", b"hello", b"k|x|1|", "k|1|y|"):
        with pytest.raises(ValueError):
            parse_payload(junk)


def test_sequencer_and_key_names() -> None:
    seqs = KeySequencer()
    assert [seqs.next("a"), seqs.next("a"), seqs.next("b"), seqs.next("a")] == [0, 1, 0, 2]
    assert seqs.issued("a") == 3 and seqs.issued("zz") == 0
    assert key_name(7) == "k00007"
