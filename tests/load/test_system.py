"""Key-hash sharding of the peers' ordered construct."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.load.system import owned_shards, shard_of


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=0, max_size=20), st.integers(1, 128))
def test_shard_is_stable_and_in_range(key: str, shards: int) -> None:
    s = shard_of(key, shards)
    assert 0 <= s < shards and s == shard_of(key, shards)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 64), st.integers(1, 128))
def test_every_shard_has_exactly_one_owner(members: int, shards: int) -> None:
    owners: dict[int, int] = {}
    for m in range(members):
        for s in owned_shards(m, members, shards):
            assert s not in owners
            owners[s] = m
    assert sorted(owners) == list(range(shards))


def test_member_out_of_range() -> None:
    with pytest.raises(ValueError):
        owned_shards(4, 4, 64)
