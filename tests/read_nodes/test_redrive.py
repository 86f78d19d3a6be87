"""The pure parts of the dead-letter redrive: which letters a round takes, in which order,
and the copies it produces; and the redrive cursors on a real Redis."""

from __future__ import annotations

from vpq.codec.batch_common import VALUE_JSON, Record
from vpq.codec.system_headers import DEDUP, GROUP, PRIORITY
from vpq.isolation.context import IsolationContext
from vpq.metadata.maps import LineageRange
from vpq.metadata.store import MetadataStore
from vpq.read_nodes.lineage_order import LineageOrder
from vpq.read_nodes.redrive import REDRIVEN_FROM_HEADER, Letter, pick, redriven_message

CTX = IsolationContext("test", "", "lane-a")


def letter(pp: int, offset: int, vp: int = 0) -> Letter:
    return Letter(pp, offset, vp, Record(value=b"1", offset=offset), CTX)


def test_pick_keeps_lineage_order_across_pps_and_stops_cursors_at_the_first_left() -> None:
    # vp 0 lived in pp 0 up to offset 100, then in pp 1 from offset 50
    order = LineageOrder({0: [LineageRange(0, 0, 100), LineageRange(1, 50, None)]})
    found = {0: [letter(0, 10), letter(0, 90)], 1: [letter(1, 60), letter(1, 70)]}
    ends = {0: 100, 1: 80}
    taken, cursors = pick(order, 1, found, ends, 10)
    assert [(t.pp, t.offset) for t in taken] == [(0, 10), (0, 90), (1, 60), (1, 70)]
    assert cursors == {0: 100, 1: 80}
    # cut at 3: pp 1's second letter stays, its cursor stops on it
    taken, cursors = pick(order, 1, found, ends, 3)
    assert [(t.pp, t.offset) for t in taken] == [(0, 10), (0, 90), (1, 60)]
    assert cursors == {0: 100, 1: 70}
    # pp 0 scanned only to 20 (cut by the scan's own limit): pp 1 must wait for the rest of pp 0
    taken, cursors = pick(order, 1, {0: [letter(0, 10)], 1: found[1]}, {0: 20, 1: 80}, 10)
    assert [(t.pp, t.offset) for t in taken] == [(0, 10)]
    assert cursors == {0: 20, 1: 60}


def test_pick_takes_vps_without_lineage_as_they_come() -> None:
    found = {2: [letter(2, 5, vp=1)], 0: [letter(0, 7, vp=0), letter(0, 9, vp=0)]}
    taken, cursors = pick(LineageOrder({}), 2, found, {0: 12, 2: 6}, 2)
    assert [(t.pp, t.offset) for t in taken] == [(0, 7), (0, 9)]
    assert cursors == {0: 12, 2: 5}


def test_redriven_copy_is_addressed_to_the_group_and_names_the_dlq() -> None:
    rec = Record(
        value=b'{"a":1}', value_encoding=VALUE_JSON, key=b"order-1", offset=3,
        headers=((GROUP, b"old"), (PRIORITY, b"7"), (DEDUP, b"d-1"), ("h", b"v"), ("x-original-id", b"0-12")),
    )
    msg = redriven_message(Letter(0, 3, 0, rec, CTX), "g", "q.g.dlq")
    assert msg.value == b'{"a":1}' and msg.value_is_json and msg.key == "order-1"
    assert dict(msg.headers) == {
        GROUP: b"g", PRIORITY: b"7", "h": b"v", "x-original-id": b"0-12", REDRIVEN_FROM_HEADER: "q.g.dlq",
    }
    assert msg.context == ("test", "", "lane-a")


async def test_redrive_cursors_only_move_forward_per_queue_id(md: MetadataStore) -> None:
    assert await md.redrive.cursors("q.g.dlq", 7) == {}
    await md.redrive.advance("q.g.dlq", 7, {0: 10, 3: 5})
    await md.redrive.advance("q.g.dlq", 7, {0: 4, 3: 9})
    assert await md.redrive.cursors("q.g.dlq", 7) == {0: 10, 3: 9}
    assert await md.redrive.cursors("q.g.dlq", 8) == {}  # the queue created again: a new log
