"""ReadyBuckets: visibility by (ctx, vp), redeliveries first, then seq order."""

from __future__ import annotations

import random

from vpq.read_nodes.ready_buckets import FIRST_DELIVERY, REDELIVERY, ReadyBuckets


def test_take_merges_visible_buckets_in_order() -> None:
    b: ReadyBuckets[str, str] = ReadyBuckets()
    b.push("x", 0, FIRST_DELIVERY, 5, "x0-5")
    b.push("x", 1, FIRST_DELIVERY, 2, "x1-2")
    b.push("x", 2, REDELIVERY, 9, "x2-9r")
    b.push("y", 0, FIRST_DELIVERY, 1, "y0-1")
    assert b.count_for(["x"], {0, 1}) == 2 and b.any_for(["y"], {0}) and not b.any_for(["y"], {1})
    assert b.take(["x"], {0, 1, 2}, 10) == ["x2-9r", "x1-2", "x0-5"]
    assert b.take(["x"], {0, 1, 2}, 10) == [] and len(b) == 1
    assert b.take(["x", "y"], {0}, 0) == []
    assert b.take(["x", "y"], {0}, 1) == ["y0-1"] and len(b) == 0


def test_random_against_sorting() -> None:
    rng = random.Random(3)
    b: ReadyBuckets[int, tuple[int, int, int, int]] = ReadyBuckets()
    items = []
    for seq in range(500):
        item = (rng.randrange(2), seq, rng.randrange(3), rng.randrange(8))  # prio, seq, ctx, vp
        items.append(item)
        b.push(item[2], item[3], item[0], seq, item)
    vps = {1, 2, 5}
    want = sorted(i for i in items if i[2] in (0, 2) and i[3] in vps)
    got = []
    while chunk := b.take([0, 2], vps, rng.randint(1, 20)):
        got.extend(chunk)
    assert got == want
    rest = b.drain()
    assert len(rest) == 500 - len(want) and len(b) == 0
