"""The pure parts of ``metadata.map_history``: notes and the public entry shape."""

from __future__ import annotations

import orjson

from vpq.metadata.map_history import MAX_LISTED, entries, queue_changes, queues_note, remap_note
from vpq.virtual_partitions.placement import VpMove


def test_queue_changes_name_created_grown_and_deleted_queues() -> None:
    before = {"a": {"virtual_partitions": 2}, "b": {"virtual_partitions": 4}, "c": {"virtual_partitions": 1}}
    after = {"b": {"virtual_partitions": 8}, "c": {"virtual_partitions": 1}, "d": {"virtual_partitions": 16}}
    assert queue_changes(before, after) == [("a", "deleted", 2), ("b", "grown", 8), ("d", "created", 16)]
    assert queue_changes(before, after, ["d", "c"]) == [("d", "created", 16)]
    assert queues_note([("d", "created", 16)]) == {
        "kind": "queues", "queues": [{"queue": "d", "change": "created", "virtual_partitions": 16}]
    }


def test_a_remap_note_lists_a_bounded_number_of_moves_and_rounds_imbalance() -> None:
    moves = [VpMove("q", vp, 0, 1) for vp in range(MAX_LISTED + 3)]
    note = remap_note("final", moves=moves, imbalance=(1.234567, 1.0), rolled_back=2)
    assert len(note["moves"]) == MAX_LISTED and note["moves_total"] == MAX_LISTED + 3
    assert note["moves"][0] == {"queue": "q", "vp": 0, "from_pp": 0, "to_pp": 1}
    assert (note["imbalance_before"], note["imbalance_after"], note["rolled_back"]) == (1.2346, 1.0, 2)
    (e,) = entries([orjson.dumps({"epoch": 9, "time_ms": 5, "note": note})])
    assert (e["epoch"], e["time_ms"], e["kind"], e["stage"], e["moves_total"], e["fenced"]) == (9, 5, "remap", "final", MAX_LISTED + 3, 0)


def test_unreadable_entries_are_skipped() -> None:
    good = orjson.dumps({"epoch": 1, "time_ms": 2, "note": {"kind": "update"}})
    assert [e["epoch"] for e in entries([b"not json", b'{"epoch": 3}', good])] == [1]
