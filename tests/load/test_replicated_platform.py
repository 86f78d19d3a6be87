"""The power-loss cut of ``load.replicated_platform``: never inside what was acknowledged."""

from __future__ import annotations

import random
from pathlib import Path

from vpq.codec.batch_common import Record
from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.load.replicated_platform import batch_starts, cut_unsynced_tail


def _segment(path: Path, sizes: list[int]) -> list[int]:
    """Batches of ``sizes`` records at consecutive offsets; the byte position of each."""
    out, positions, base = bytearray(), [], 0
    for n in sizes:
        positions.append(len(out))
        records = [Record(value=b"v" * 10, queue_id=1, virtual_partition=0, key_hash=0, context_id=0) for _ in range(n)]
        out += build_columnar_batch(base, 1000, columns_of(records, 1000))
        base += n
    path.write_bytes(bytes(out))
    return positions


def test_batch_starts_lists_each_batch(tmp_path):
    path = tmp_path / "seg.log"
    positions = _segment(path, [3, 3, 3])
    assert batch_starts(path) == [(positions[0], 0, 3), (positions[1], 3, 6), (positions[2], 6, 9)]


def test_a_batch_partly_acknowledged_is_never_cut(tmp_path):
    """Offsets 3..5 are one batch; an acknowledgement of offset 3 (acked end 4) proves it
    was fsynced whole, so every cut keeps it."""
    path = tmp_path / "seg.log"
    positions = _segment(path, [3, 3, 3])
    for seed in range(200):
        _segment(path, [3, 3, 3])
        cut_unsynced_tail(path, 4, random.Random(seed))
        assert path.stat().st_size >= positions[2]


def test_only_batches_past_the_acknowledged_end_may_go(tmp_path):
    path = tmp_path / "seg.log"
    positions = _segment(path, [3, 3, 3])
    size = path.stat().st_size
    sizes = set()
    for seed in range(200):
        _segment(path, [3, 3, 3])
        assert cut_unsynced_tail(path, 6, random.Random(seed)) == size - path.stat().st_size
        sizes.add(path.stat().st_size)
    assert min(sizes) == positions[2] and max(sizes) <= size
    _segment(path, [3, 3, 3])
    assert cut_unsynced_tail(path, 9, random.Random(0)) == 0
