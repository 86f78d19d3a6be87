"""RecordCache: LRU by bytes, stats."""

from __future__ import annotations

import pytest

from vpq.read_nodes.record_cache import RecordCache


def test_lru_by_bytes() -> None:
    c: RecordCache[tuple[int, int], str] = RecordCache(100)
    assert c.put((0, 1), "a", 40) and c.put((0, 2), "b", 40)
    assert c.get((0, 1)) == "a"  # (0, 2) is now least recently used
    assert c.put((0, 3), "c", 40)
    assert (0, 2) not in c and c.get((0, 1)) == "a" and c.get((0, 3)) == "c"
    assert c.bytes == 80 and len(c) == 2
    s = c.stats()
    assert (s.evictions, s.evicted_bytes, s.hits, s.misses, s.puts) == (1, 40, 3, 0, 3)
    assert c.get((9, 9)) is None and c.stats().misses == 1
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
