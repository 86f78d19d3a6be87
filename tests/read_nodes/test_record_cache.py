"""RecordCache: first in first out by bytes, stats."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.read_nodes.record_cache import RecordCache


def test_first_in_first_out_by_bytes() -> None:
    c: RecordCache[tuple[int, int], str] = RecordCache(100)
    assert c.put((0, 1), "a", 40) and c.put((0, 2), "b", 40)
    assert c.get((0, 1)) == "a"  # a read does not keep (0, 1) longer
    assert c.put((0, 3), "c", 40)
    assert (0, 1) not in c and c.get((0, 2)) == "b" and c.get((0, 3)) == "c"
    assert c.put((0, 2), "b2", 40)  # a replacement is stored anew: (0, 3) is now the oldest
    assert c.put((0, 4), "d", 40)
    assert (0, 3) not in c and c.get_many([(0, 2), (0, 4), (0, 3)]) == ["b2", "d", None]
    assert c.bytes == 80 and len(c) == 2
    s = c.stats()
    assert (s.evictions, s.evicted_bytes, s.hits, s.misses, s.puts) == (2, 80, 5, 1, 5)
    assert c.get((9, 9)) is None and c.stats().misses == 2
    assert 0 < c.stats().hit_ratio < 1


def test_replace_oversize_pop_resize() -> None:
    c: RecordCache[str, int] = RecordCache(100)
    c.put("k", 1, 60)
    c.put("k", 2, 30)  # replacing frees the old size
    assert c.bytes == 30 and c.get("k") == 2
    assert c.put("huge", 3, 101) is False and "huge" not in c and c.stats().rejected == 1
    c.put("k", 4, 200)  # an oversize replacement drops the old value
    assert "k" not in c and c.bytes == 0
    c.put("a", 1, 50)
    c.put("b", 2, 50)
    assert c.pop("a") == 1 and c.pop("a") is None and c.bytes == 50
    c.put("c", 3, 50)
    c.resize(60)
    assert list(k for k in ("b", "c") if k in c) == ["c"] and c.bytes == 50
    c.clear()
    assert len(c) == 0 and c.bytes == 0
    with pytest.raises(ValueError):
        RecordCache(0)
    with pytest.raises(ValueError):
        c.put("x", 1, -1)


def test_bound_holds_under_random_puts() -> None:
    import random

    rng = random.Random(1)
    c: RecordCache[int, int] = RecordCache(1000)
    for i in range(2000):
        c.put(rng.randrange(300), i, rng.randrange(0, 120))
        assert c.bytes <= 1000
        if rng.random() < 0.3:
            c.get(rng.randrange(300))
    s = c.stats()
    assert s.entries == len(c) and s.bytes == c.bytes


def _ops_cache(max_bytes: int) -> RecordCache[int, str]:
    c: RecordCache[int, str] = RecordCache(max_bytes)
    for k in range(5):
        c.put(k, f"old{k}", 10)
    c.get(0)
    return c


def test_put_many_keeps_what_one_put_each_keeps() -> None:
    entries = [(2, "a", 30), (7, "b", 25), (8, "big", 500), (9, "c", 40), (3, "d", 5)]
    one, many = _ops_cache(100), _ops_cache(100)
    for key, value, size in entries:
        one.put(key, value, size)
    assert many.put_many(entries) == 4
    assert list(many._data.items()) == list(one._data.items())  # same entries, same order
    s1, s2 = one.stats(), many.stats()
    assert (s2.puts, s2.rejected, s2.hits, s2.misses) == (s1.puts, s1.rejected, s1.hits, s1.misses)
    assert many.bytes == one.bytes <= 100
    # key 3 was replaced in place rather than evicted first and put again
    assert s2.evictions == s1.evictions - 1


def test_get_many_is_one_get_each() -> None:
    one, many = _ops_cache(100), _ops_cache(100)
    keys = [3, 9, 1, 3]
    assert many.get_many(keys) == [one.get(k) for k in keys] == ["old3", None, "old1", "old3"]
    assert list(many._data) == list(one._data) and many.stats() == one.stats()


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.lists(st.lists(st.integers(0, 60), max_size=40), max_size=25))
def test_batches_of_new_keys_keep_what_one_put_each_keeps(max_bytes: int, batches: list) -> None:
    """A tailer's batches (keys never cached before): ``put_many`` keeps the newest
    entries that fit, the same as one ``put`` at a time."""
    many: RecordCache[int, int] = RecordCache(max_bytes)
    one: RecordCache[int, int] = RecordCache(max_bytes)
    key = 0
    for sizes in batches:
        keys = list(range(key, key + len(sizes)))
        key += len(sizes)
        for k, size in zip(keys, sizes):
            one.put(k, -k, size)
        many.put_many(zip(keys, [-k for k in keys], sizes))
        assert list(many._data.items()) == list(one._data.items())  # noqa: SLF001
        assert many.bytes == one.bytes <= max_bytes
    assert many.stats() == one.stats()
