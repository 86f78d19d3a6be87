"""Lineage rules: ranges open/seal in order, per-pp offsets only grow, split copies,
follow() turns a new placement into sealed/opened ranges."""

from __future__ import annotations

import json

import pytest

from vpq.virtual_partitions.lineage import Lineage, LineageRange, QueueLineage, split_lineage
from vpq.virtual_partitions.placement import QueuePlacement


def test_open_seal_move() -> None:
    lin = Lineage().open_range(0, 100)
    assert lin.current == LineageRange(0, 100, None) and lin.is_open
    lin = lin.move(2, seal_at=150, open_at=40)
    assert lin.ranges == (LineageRange(0, 100, 150), LineageRange(2, 40, None))
    assert lin.current == LineageRange(2, 40)
    sealed = lin.seal(60)
    assert sealed.current is None and not sealed.is_open


def test_open_only_after_seal() -> None:
    lin = Lineage().open_range(0, 0)
    with pytest.raises(ValueError, match="still open"):
        lin.open_range(1, 0)
    with pytest.raises(ValueError, match="no open range"):
        Lineage().seal(5)
    with pytest.raises(ValueError, match="below from_offset"):
        lin.seal(0).open_range(1, 10).seal(5)


def test_only_last_range_may_be_open() -> None:
    with pytest.raises(ValueError, match="open but is not the last"):
        Lineage((LineageRange(0, 0), LineageRange(1, 0)))


def test_offsets_on_a_pp_only_grow() -> None:
    lin = Lineage().open_range(0, 10).move(1, seal_at=20, open_at=0)
    with pytest.raises(ValueError, match="below the end 20"):
        lin.move(0, seal_at=5, open_at=19)
    back = lin.move(0, seal_at=5, open_at=20)
    assert [r.pp for r in back.ranges] == [0, 1, 0]


def test_index_of_and_drop_first() -> None:
    lin = Lineage().open_range(0, 10).move(1, 20, 0).move(0, 5, 30)
    assert lin.index_of(0, 10) == 0
    assert lin.index_of(0, 20) is None  # to_offset is exclusive
    assert lin.index_of(1, 4) == 1
    assert lin.index_of(0, 10**9) == 2
    assert lin.drop_first(2).ranges == (LineageRange(0, 30),)
    with pytest.raises(ValueError, match="open range"):
        lin.drop_first(3)


def test_range_validation() -> None:
    for args in ((-1, 0, None), (0, -1, None), (0, 5, 4), (0, True, None)):
        with pytest.raises(ValueError):
            LineageRange(*args)


def test_round_trip_and_format() -> None:
    lin = Lineage().open_range(0, 10).move(1, 20, 0)
    d = lin.to_dict()
    assert d == [{"pp": 0, "from": 10, "to": 20}, {"pp": 1, "from": 0, "to": None}]
    assert Lineage.from_dict(json.loads(json.dumps(d))) == lin
    with pytest.raises(ValueError):
        Lineage.from_dict([{"pp": 0, "from": 1}])
    with pytest.raises(ValueError):
        Lineage.from_dict({"pp": 0})


def test_split_lineage_copies() -> None:
    lin = Lineage().open_range(0, 10).move(1, 20, 0)
    a, b = split_lineage(lin)
    assert a == b == lin


def test_queue_lineage_new_split_follow() -> None:
    placement = QueuePlacement(2, (0, 1))
    ql = QueueLineage.new(placement, {0: 100, 1: 7})
    assert [lin.current for lin in ql.vps] == [LineageRange(0, 100), LineageRange(1, 7)]
    # publish: split to 4, move vp 3 (child of vp 1) to pp 2
    new_placement = placement.split().move(3, 2)
    ql2 = ql.follow(new_placement, {0: 150, 1: 40, 2: 9})
    assert ql2.virtual_partitions == 4
    assert ql2.vps[0] == ql.vps[0] and ql2.vps[2] == ql.vps[0]
    assert ql2.vps[1] == ql.vps[1]
    assert ql2.vps[3].ranges == (LineageRange(1, 7, 40), LineageRange(2, 9))
    # every vp's open range is on its pp
    assert all(lin.current.pp == new_placement.pp_of(vp) for vp, lin in enumerate(ql2.vps))
    assert QueueLineage.from_dict(json.loads(json.dumps(ql2.to_dict()))) == ql2


def test_follow_errors() -> None:
    ql = QueueLineage.new(QueuePlacement(2, (0, 1)), {})
    with pytest.raises(ValueError, match="end offset of pp 1"):
        ql.follow(QueuePlacement(2, (0, 0)), {0: 5})
    with pytest.raises(ValueError, match="cannot shrink"):
        ql.follow(QueuePlacement(1, (0,)), {0: 5})
    with pytest.raises(ValueError, match="power of two"):
        QueueLineage((Lineage(),) * 3)
    with pytest.raises(ValueError):
        QueueLineage.from_dict({"virtual_partitions": 2, "vps": [[]]})


def test_queue_lineage_move() -> None:
    ql = QueueLineage.new(QueuePlacement(2, (0, 1)), {0: 3, 1: 4})
    moved = ql.move(0, 1, seal_at=8, open_at=12)
    assert moved.vps[0].ranges == (LineageRange(0, 3, 8), LineageRange(1, 12))
    assert moved.vps[1] == ql.vps[1]
    with pytest.raises(ValueError, match="out of range"):
        ql.lineage(2)
