"""Replica state on disk: the leader-epoch history, follower appends, truncation (real files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.write_nodes.helpers import make_records, read_all, small_settings
from vpq.codec.records import BatchView, decode_batches
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.replica_log import HISTORY_FILE, EpochHistory, decode_history, trim_batches, truncate_log_dir


def test_end_offset_for_is_offsets_for_leader_epoch(tmp_path: Path) -> None:
    h = EpochHistory(tmp_path, [(1, 0), (3, 100), (4, 100), (6, 250)])
    assert h.end_offset_for(1, 400) == (1, 100)
    assert h.end_offset_for(2, 400) == (1, 100)  # unknown epoch: the largest below it
    assert h.end_offset_for(3, 400) == (3, 100)
    assert h.end_offset_for(4, 400) == (4, 250)
    assert h.end_offset_for(6, 400) == (6, 400)  # the current epoch ends at the log end
    assert h.end_offset_for(9, 400) == (6, 400)
    assert h.end_offset_for(0, 400) == (-1, 0)
    assert EpochHistory(tmp_path, []).end_offset_for(5, 10) == (-1, 0)


def test_history_survives_a_restart_without_entries_past_the_log(tmp_path: Path) -> None:
    h = EpochHistory(tmp_path, [])
    assert h.changed_by_assign(1, 0) and h.changed_by_assign(2, 40)
    assert not h.changed_by_assign(2, 50)  # one entry per epoch, epochs only grow
    h.save()
    assert EpochHistory.load(tmp_path, 100).entries == [(1, 0), (2, 40)]
    assert EpochHistory.load(tmp_path, 39).entries == [(1, 0)]  # the crash took offset 40 back
    (tmp_path / HISTORY_FILE).write_bytes(b"garbage")
    assert EpochHistory.load(tmp_path, 100).entries == []  # damaged: the follower truncates further
    assert decode_history(b"vpq-leader-epochs 1\n1 x\n") is None


def test_adopt_takes_the_leaders_entries_up_to_what_was_copied(tmp_path: Path) -> None:
    h = EpochHistory(tmp_path, [(1, 0)])
    assert not h.adopt([(1, 0)], 0)
    assert h.adopt([(1, 0), (2, 30), (5, 80)], 50)
    assert h.entries == [(1, 0), (2, 30)]
    assert h.adopt([(1, 0), (2, 30), (5, 80)], 80)
    assert h.last_epoch == 5
    h.truncate(30)
    assert h.entries == [(1, 0)]


async def _log_with(tmp_path: Path, batches: int, per: int = 3) -> tuple[PartitionLog, list[bytes]]:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    values: list[bytes] = []
    for i in range(batches):
        recs = make_records(f"b{i}", per)
        await log.append(recs)
        values += [r.value for r in recs]
    return log, values


async def test_truncate_log_dir_cuts_at_a_batch_boundary_across_segments(tmp_path: Path) -> None:
    log, values = await _log_with(tmp_path, 120)
    assert log.segment_count > 3
    await log.stop()
    truncate_log_dir(tmp_path, 100, small_settings().index_interval_bytes, 0)  # inside a batch: it goes whole
    again = PartitionLog(tmp_path, small_settings())
    report = await again.start()
    assert report.recovered_end_offset == 99
    assert [r.value for r in read_all(again)] == values[:99]
    await again.stop()
    truncate_log_dir(tmp_path, 0, small_settings().index_interval_bytes, 0)
    empty = PartitionLog(tmp_path, small_settings())
    assert (await empty.start()).recovered_end_offset == 0
    await empty.stop()


async def test_a_follower_copies_batches_at_the_leaders_offsets(tmp_path: Path) -> None:
    leader, values = await _log_with(tmp_path / "leader", 30)
    follower = PartitionLog(tmp_path / "follower", small_settings())
    await follower.start()
    pos = 0
    while pos < leader.durable_end_offset:
        data = leader.read(pos, 500)
        at = 0
        while at < len(data):
            view = BatchView(data, at)
            await follower.submit_replica(data[at : at + view.size])
            at += view.size
            pos = view.next_offset
    assert [r.value for r in read_all(follower)] == values
    assert follower.durable_end_offset == leader.durable_end_offset
    with pytest.raises(ValueError, match="does not continue"):
        follower.submit_replica(leader.read(0, 1))
    corrupt = bytearray(leader.read(0, 1))
    corrupt[-1] ^= 1
    await follower.stop()
    f2 = PartitionLog(tmp_path / "f2", small_settings())
    await f2.start()
    with pytest.raises(ValueError, match="CRC"):
        f2.submit_replica(bytes(corrupt))
    await f2.stop()
    await leader.stop()


async def test_trim_batches_keeps_whole_batches_below_the_end(tmp_path: Path) -> None:
    log, _ = await _log_with(tmp_path, 5, per=4)
    data = log.read(0, 1 << 20)
    assert trim_batches(data, 20) == data
    kept = trim_batches(data, 9)  # batches [0,4) [4,8) whole; [8,12) reaches past 9
    assert len(kept) < len(data) and trim_batches(kept, 8) == kept
    assert trim_batches(data, 3) == b""
    await log.stop()


def _gapped(log: PartitionLog) -> list[tuple[int, bytes]]:
    """(offset, value) of every readable record of a log that may have gaps."""
    out: list[tuple[int, bytes]] = []
    cursor = log.start_offset
    while data := log.read(cursor, 700):
        fresh = [(r.offset, r.value) for r in decode_batches(data, verify=True) if r.offset >= cursor]
        if not fresh:
            return out
        out += fresh
        cursor = fresh[-1][0] + 1
    return out


async def test_a_follower_skips_the_gaps_of_a_compacted_leader_and_recovers_them(tmp_path: Path) -> None:
    leader, _ = await _log_with(tmp_path / "leader", 120)
    batches: list[bytes] = []
    pos = 0
    while pos < leader.durable_end_offset:
        data = leader.read(pos, 1)
        view = BatchView(data, 0)
        batches.append(data[: view.size])
        pos = view.next_offset
    await leader.stop()
    kept = [b for i, b in enumerate(batches) if i % 3 == 1]  # the leader compacted 2 batches of 3 away
    follower = PartitionLog(tmp_path / "follower", small_settings())
    await follower.start()
    for batch in kept:
        with pytest.raises(ValueError, match="does not continue"):
            follower.submit_replica(batch)  # a gap needs skip_to first
        await follower.skip_to(BatchView(batch, 0).base_offset)
        await follower.submit_replica(batch)
    await follower.skip_to(500)  # a trailing range compacted away
    assert follower.end_offset == follower.durable_end_offset == 500
    expected = [(r.offset, r.value) for b in kept for r in decode_batches(b)]
    assert _gapped(follower) == expected
    segments = follower.segment_count
    assert segments >= 3  # rolls at batches that follow a gap
    await follower.stop()

    again = PartitionLog(tmp_path / "follower", small_settings())
    report = await again.start()  # recovery accepts the gaps and the segments still continue each other
    assert report.recovered_end_offset == 500 and report.bytes_truncated == 0
    assert again.segment_count == segments
    assert _gapped(again) == expected
    await again.stop()

    truncate_log_dir(tmp_path / "follower", 450, small_settings().index_interval_bytes, 0)
    cut = PartitionLog(tmp_path / "follower", small_settings())
    assert (await cut.start()).recovered_end_offset <= 450  # the skip marker past the cut is lowered
    assert _gapped(cut) == [e for e in expected if e[0] < cut.end_offset]
    await cut.stop()
