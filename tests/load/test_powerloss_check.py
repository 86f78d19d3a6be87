"""The pure parts of the power-loss campaign: the delivery check and the crash points."""

from __future__ import annotations

import random

from vpq.load.powerloss import CrashPoint, plan_crash, trigger_for
from vpq.load.powerloss_check import check_delivery, message_value
from vpq.write_nodes.sim_disk import SimOp


def _log(*idents: tuple[int, int]) -> list[tuple[int, bytes]]:
    return [(offset, message_value(p, s)) for offset, (p, s) in enumerate(idents)]


def test_a_log_with_every_acknowledged_message_in_order_passes_with_unacknowledged_extras() -> None:
    check = check_delivery({(0, 0): 0, (1, 0): 1}, _log((0, 0), (1, 0), (0, 1)))
    assert check.ok and (check.acked, check.found) == (2, 3)


def test_lost_moved_reordered_duplicated_and_foreign_records_are_counted() -> None:
    acked = {(0, 0): 0, (0, 1): 1, (1, 0): 2, (2, 0): 9}
    records = _log((0, 1), (0, 0), (1, 0), (1, 0)) + [(4, b"junk")]
    check = check_delivery(acked, records)
    assert not check.ok
    assert (check.lost, check.moved, check.reordered, check.duplicated, check.foreign) == (1, 2, 1, 1, 1)


def _fire_at(point: CrashPoint, ops: list[SimOp]) -> int | None:
    trigger = trigger_for(point)
    assert trigger is not None
    return next((i for i, op in enumerate(ops) if trigger(op)), None)


def test_crash_points_fire_where_they_say() -> None:
    seg, idx = "/p/00000000000000000007.log", "/p/00000000000000000000.index.tmp"
    ops = [SimOp("write", seg), SimOp("fsync", seg), SimOp("create", seg), SimOp("fsync", idx), SimOp("write", seg),
           SimOp("fsync", seg), SimOp("fsync", "/p")]
    assert _fire_at(CrashPoint("ops", 4, 0.0, "strict"), ops) == 3
    assert _fire_at(CrashPoint("group", 2, 0.0, "strict"), ops) == 5  # the second fsync of a segment file
    assert _fire_at(CrashPoint("roll", 2, 0.0, "strict"), ops) == 4  # the 2nd call after the new segment's creation
    assert trigger_for(CrashPoint("timer", 0, 0.1, "lazy")) is None


def test_planned_crash_points_cover_every_kind_and_both_modes() -> None:
    rng = random.Random(1)
    points = [plan_crash(rng) for _ in range(200)]
    assert {p.kind for p in points} == {"ops", "group", "roll", "timer"}
    assert {p.mode for p in points} == {"strict", "lazy"}
    assert all(p.n >= 1 for p in points if p.kind != "timer")
