"""``tailer.index_columns``: the index rows of decoded records, a column at a time."""

from __future__ import annotations

from vpq.isolation.context import IsolationContext
from vpq.read_nodes.messages import TailedRecord
from vpq.read_nodes.tailer import index_columns, pack_ref


def _rec(offset: int, queue_id: int, context_id: int, key_hash: int) -> TailedRecord:
    return TailedRecord(
        pp=3, ctx=IsolationContext(), offset=offset, key=None, value=b"", headers=(), timestamp_ms=0,
        value_encoding=0, queue_id=queue_id, context_id=context_id, key_hash=key_hash, virtual_partition=0,
    )


def _rows(records: list[TailedRecord]) -> list[tuple[int, int, int, int]]:
    return [(r.offset, r.queue_id, pack_ref(r.context_id, r.key_hash), r.context_id) for r in records]


def test_one_context_zero_other_and_mixed() -> None:
    for ctxs in ([0, 0, 0], [5, 5, 5], [0, 5, 0], [5, 0, 7]):
        records = [_rec(10 + i, 1 + i % 2, c, 0xFFFF_FFFF - i) for i, c in enumerate(ctxs)]
        assert list(zip(*index_columns(records))) == _rows(records)
    assert index_columns([]) == ([], [], [], [])
