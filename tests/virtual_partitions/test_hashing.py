"""Key hashing: golden values pinned forever, an independent MurmurHash3 reference,
and the keyless spreader's evenness."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.virtual_partitions.hashing import (
    KeylessSpreader,
    ancestor_vp,
    check_virtual_partitions,
    hash_for_key,
    is_power_of_two,
    key_hash,
    split_children,
    vp_for_key,
    vp_of_hash,
)

# key -> (unsigned mmh3_32 seed 0, vp for V = 1, 16, 256, 4096). Never change these:
# they decide where every stored keyed message lives.
GOLDEN: list[tuple[bytes, int, tuple[int, int, int, int]]] = [
    (b"", 0, (0, 0, 0, 0)),
    (b"hello", 613153351, (0, 7, 71, 2631)),
    (b"foo", 4138058784, (0, 0, 32, 1056)),
    (b"order-42", 1259446670, (0, 14, 142, 398)),
    (b"user-1", 4171401059, (0, 3, 99, 1891)),
    ("caf\u00e9".encode(), 605818632, (0, 8, 8, 3848)),
    (b"\x00\xff", 3712929428, (0, 4, 148, 3732)),
    (b"a" * 100, 2398069864, (0, 8, 104, 1128)),
]


def murmur3_32_reference(data: bytes, seed: int = 0) -> int:
    """Independent, straightforward MurmurHash3 x86_32 (Austin Appleby's algorithm)."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed & mask
    n_blocks = len(data) // 4
    for i in range(n_blocks):
        k = int.from_bytes(data[4 * i : 4 * i + 4], "little")
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    tail = data[4 * n_blocks :]
    k = 0
    for i, b in enumerate(tail):
        k |= b << (8 * i)
    if tail:
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        k = (k * c2) & mask
        h ^= k
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    h ^= h >> 16
    return h


@pytest.mark.parametrize("key,h,vps", GOLDEN)
def test_golden_values(key: bytes, h: int, vps: tuple[int, ...]) -> None:
    assert key_hash(key) == h
    assert tuple(vp_of_hash(h, v) for v in (1, 16, 256, 4096)) == vps


def test_known_vectors_and_hand_checked_vps() -> None:
    # published MurmurHash3_x86_32 vectors (seed 0)
    assert key_hash(b"") == 0
    assert key_hash(b"hello") == 613153351
    assert key_hash(b"foo") == 4138058784
    assert key_hash(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    # 613153351 = 0x248BFA47: low nibble 7, low byte 0x47 = 71, low 12 bits 0xA47 = 2631
    assert vp_of_hash(0x248BFA47, 16) == 7 and vp_of_hash(0x248BFA47, 256) == 71
    assert vp_of_hash(0x248BFA47, 4096) == 2631


def test_reference_implementation_matches_vectors() -> None:
    for key, h, _ in GOLDEN:
        assert murmur3_32_reference(key) == h


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_matches_independent_reference(key: bytes) -> None:
    assert key_hash(key) == murmur3_32_reference(key)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=32))
def test_str_keys_hash_as_utf8(key: str) -> None:
    assert key_hash(key) == key_hash(key.encode("utf-8"))
    assert 0 <= key_hash(key) < 2**32


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 12))
def test_split_children_partition_the_hash(h: int, log_v: int) -> None:
    v = 1 << log_v
    old = vp_of_hash(h, v)
    new = vp_of_hash(h, 2 * v)
    assert new in split_children(old, v)
    assert ancestor_vp(new, v) == old
    assert new == h % (2 * v)


def test_keyless_spreader_round_robin_is_even() -> None:
    s = KeylessSpreader()
    seen = [s.next_vp(16) for _ in range(16 * 5)]
    assert all(seen.count(vp) == 5 for vp in range(16))
    assert seen[:4] == [0, 1, 2, 3]


def test_keyless_spreader_deterministic_and_wraps() -> None:
    a, b = KeylessSpreader(2**32 - 1), KeylessSpreader(-1)
    assert [a.next_hash() for _ in range(3)] == [2**32 - 1, 0, 1]
    assert b.next_hash() == 2**32 - 1
    with pytest.raises(ValueError):
        KeylessSpreader("x")  # type: ignore[arg-type]


def test_vp_for_key_keyed_and_keyless() -> None:
    s = KeylessSpreader(5)
    assert vp_for_key(b"hello", 16, s) == 7
    assert vp_for_key("hello", 16, s) == 7
    # keyed messages do not advance the spreader
    assert vp_for_key(None, 16, s) == 5
    assert vp_for_key(None, 16, s) == 6
    assert hash_for_key(None, s) == 7
    assert hash_for_key(b"", s) == 0


def test_power_of_two_checks() -> None:
    assert [n for n in range(-2, 20) if is_power_of_two(n)] == [1, 2, 4, 8, 16]
    assert not is_power_of_two(True)
    assert check_virtual_partitions(4096) == 4096
    for bad in (0, 3, 12, -4, 2**33, 1.0):
        with pytest.raises(ValueError, match="power of two"):
            check_virtual_partitions(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        split_children(16, 16)
