"""Placement maps: wire format, split, move, epochs, initial spreading, validation."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.virtual_partitions.placement import (
    PlacementMap,
    QueuePlacement,
    VpMove,
    initial_placement,
    moves_between,
)


def sample_map() -> PlacementMap:
    return PlacementMap(7, {"orders": QueuePlacement(4, (0, 1, 2, 3)), "audit": QueuePlacement(1, (2,))})


def test_to_dict_is_the_api_format() -> None:
    d = sample_map().to_dict()
    assert d == {
        "epoch": 7,
        "queues": {
            "audit": {"virtual_partitions": 1, "placement": [2]},
            "orders": {"virtual_partitions": 4, "placement": [0, 1, 2, 3]},
        },
    }
    assert PlacementMap.from_dict(json.loads(json.dumps(d))) == sample_map()


@st.composite
def maps(draw: st.DrawFn) -> PlacementMap:
    names = draw(st.lists(st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True), max_size=5, unique=True))
    queues = {}
    for n in names:
        v = 1 << draw(st.integers(0, 5))
        queues[n] = QueuePlacement(v, tuple(draw(st.lists(st.integers(0, 7), min_size=v, max_size=v))))
    return PlacementMap(draw(st.integers(0, 10**6)), queues)


@settings(max_examples=100, deadline=None)
@given(maps())
def test_round_trip(m: PlacementMap) -> None:
    assert PlacementMap.from_dict(json.loads(json.dumps(m.to_dict()))) == m


def test_split_doubles_and_keeps_placement() -> None:
    m = sample_map().split("orders")
    qp = m.queue("orders")
    assert qp.virtual_partitions == 8
    assert qp.placement == (0, 1, 2, 3, 0, 1, 2, 3)
    for i in range(4):
        assert m.pp_of("orders", i) == m.pp_of("orders", i + 4) == sample_map().pp_of("orders", i)
    assert m.epoch == 7  # content changes do not bump the epoch
    assert moves_between(sample_map(), m) == []


def test_move_and_next_epoch() -> None:
    m0 = sample_map()
    m1 = m0.move("orders", 2, 0).next_epoch()
    assert m1.epoch == 8 and m1.pp_of("orders", 2) == 0
    assert m0.pp_of("orders", 2) == 2  # immutable
    assert moves_between(m0, m1) == [VpMove("orders", 2, 2, 0)]
    assert m0.move("orders", 2, 2) is m0


def test_moves_between_after_split_compares_with_ancestor() -> None:
    m0 = sample_map()
    m1 = m0.split("orders").move("orders", 5, 3)
    assert moves_between(m0, m1) == [VpMove("orders", 5, 1, 3)]
    with pytest.raises(ValueError, match="shrank"):
        moves_between(m1, m0)


def test_with_and_without_queue() -> None:
    m = sample_map().with_queue("new", 2, [1, 1])
    assert m.queue("new") == QueuePlacement(2, (1, 1))
    assert "new" in m and "new" not in sample_map()
    assert "new" not in m.without_queue("new")
    with pytest.raises(ValueError, match="not in the placement map"):
        sample_map().without_queue("nope")
    assert m.vp_count_by_pp() == {0: 1, 1: 3, 2: 2, 3: 1}
    assert m.queue("orders").vps_on(2) == (2,)


def test_queues_mapping_is_read_only() -> None:
    m = sample_map()
    with pytest.raises(TypeError):
        m.queues["x"] = QueuePlacement(1, (0,))  # type: ignore[index]


@pytest.mark.parametrize(
    "data,match",
    [
        ({"queues": {}}, "needs 'epoch'"),
        ({"epoch": -1, "queues": {}}, "epoch"),
        ({"epoch": True, "queues": {}}, "epoch"),
        ({"epoch": 1, "queues": []}, "'queues' must be an object"),
        ({"epoch": 1, "queues": {}, "x": 1}, "unexpected fields"),
        ({"epoch": 1, "queues": {"bad name": {"virtual_partitions": 1, "placement": [0]}}}, "invalid queue name"),
        ({"epoch": 1, "queues": {"q": {"virtual_partitions": 3, "placement": [0, 0, 0]}}}, "power of two"),
        ({"epoch": 1, "queues": {"q": {"virtual_partitions": 2, "placement": [0]}}}, "expected one per vp"),
        ({"epoch": 1, "queues": {"q": {"virtual_partitions": 1, "placement": [-1]}}}, "pp of vp 0"),
        ({"epoch": 1, "queues": {"q": {"virtual_partitions": 1, "placement": ["0"]}}}, "pp of vp 0"),
        ({"epoch": 1, "queues": {"q": {"virtual_partitions": 1}}}, "needs"),
        ({"epoch": 1, "queues": {"q": {"virtual_partitions": 1, "placement": 0}}}, "list of pp"),
    ],
)
def test_from_dict_rejects(data: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PlacementMap.from_dict(data)


def test_errors_name_the_queue_and_vp() -> None:
    with pytest.raises(ValueError, match="queue 'q'"):
        PlacementMap.from_dict({"epoch": 1, "queues": {"q": {"virtual_partitions": 2, "placement": [0]}}})
    with pytest.raises(ValueError, match="vp 4 out of range"):
        sample_map().pp_of("orders", 4)
    with pytest.raises(ValueError, match="not in the placement map"):
        sample_map().pp_of("nope", 0)


def test_initial_placement_round_robin_from_name_hash() -> None:
    p = initial_placement("orders", 16, [3, 0, 2, 1])
    assert Counter(p) == {0: 4, 1: 4, 2: 4, 3: 4}
    start = p[0]
    assert list(p[:4]) == [(start + i) % 4 for i in range(4)]
    assert initial_placement("orders", 16, [0, 1, 2, 3]) == p  # order of pps does not matter


def test_many_small_queues_spread_evenly() -> None:
    counts: Counter[int] = Counter()
    for i in range(2000):
        counts.update(initial_placement(f"q{i}", 1, range(8)))
    assert len(counts) == 8
    assert max(counts.values()) - min(counts.values()) < 0.2 * 2000 / 8


def test_initial_placement_with_load_hint_prefers_light_pps() -> None:
    p = initial_placement("orders", 8, [0, 1, 2, 3], load_hint={0: 10, 1: 0, 2: 2})
    c = Counter(p)
    assert c[0] == 0
    # 8 new vps over loads {1: 0, 2: 2, 3: 0} -> final loads 1:3|4, 2:4|3, 3:3|4 (one unit apart)
    final = {pp: c[pp] + {1: 0, 2: 2, 3: 0}[pp] for pp in (1, 2, 3)}
    assert max(final.values()) - min(final.values()) <= 1
    assert sum(final.values()) == 10


@pytest.mark.parametrize(
    "args,match",
    [
        (("orders", 16, []), "at least one physical partition"),
        (("orders", 12, [0]), "power of two"),
        (("bad name", 16, [0]), "invalid queue name"),
        (("orders", 16, [-1]), "pp"),
    ],
)
def test_initial_placement_validation(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        initial_placement(*args)
    with pytest.raises(ValueError, match="load_hint"):
        initial_placement("orders", 4, [0, 1], load_hint={0: -1})
