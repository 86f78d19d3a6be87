"""Deduplicated appends to a real PartitionLog and the index rebuilt from the log."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest

from tests.write_nodes.helpers import read_all, small_settings, threaded_settings
from vpq.codec.batch_common import Record
from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import BatchView
from vpq.codec.system_headers import attribute_headers, split
from vpq.node_rpc.append_frames import Deduplicated
from vpq.write_nodes.dedup import DedupIndex
from vpq.write_nodes.dedup_log import admit, rebuild
from vpq.write_nodes.errors import DiskFullError, PartitionOfflineError
from vpq.write_nodes.log import PartitionLog

WINDOW = 60_000


def window_of(qid: int) -> int:
    return 0 if qid == 9 else WINDOW


def batch(ids: list[str | None], *, qid: int = 1, ts: int = 1_000, tag: str = "m") -> tuple[bytes, BatchView]:
    recs = [
        Record(
            value=f"{tag}-{i}".encode(),
            queue_id=qid,
            virtual_partition=i % 4,
            key=f"k{i}".encode(),
            headers=attribute_headers(None, 0, d) if d is not None else (),
            timestamp_ms=ts + i,
        )
        for i, d in enumerate(ids)
    ]
    data = build_columnar_batch(0, ts, columns_of(recs, ts))
    return data, BatchView(data)


def stored_ids(log: PartitionLog) -> list[str | None]:
    return [split(r.headers)[0].dedup_id for r in read_all(log)]


async def test_retries_are_answered_with_the_stored_coordinates(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    idx = DedupIndex()
    first = await admit(log, idx, *batch(["a", "b", "c"]), 2_000, window_of)
    assert first == (0, 2)
    again = await admit(log, idx, *batch(["a", "b", "c"], tag="retry"), 3_000, window_of)
    assert again == Deduplicated([0, 1, 2], [0, 1, 2])
    # a batch mixing stored, new, repeated-in-batch and id-less records
    mixed = await admit(log, idx, *batch(["b", "d", None, "d", "e"]), 4_000, window_of)
    assert mixed == Deduplicated([1, 3, 4, 3, 5], [1, 1, 2, 1, 0])
    records = read_all(log)
    assert stored_ids(log) == ["a", "b", "c", "d", None, "e"]
    assert [r.offset for r in records] == list(range(6))
    assert [r.value for r in records][3:] == [b"m-1", b"m-2", b"m-4"]
    assert [r.timestamp_ms for r in records][3:] == [1_001, 1_002, 1_004]  # kept records keep their time
    assert idx.duplicates == 5
    # a queue whose window is 0 stores every copy
    assert await admit(log, idx, *batch(["a"], qid=9), 5_000, window_of) == (6, 6)
    assert await admit(log, idx, *batch(["a"], qid=9), 5_000, window_of) == (7, 7)
    await log.stop()


async def test_a_retry_of_a_copy_still_in_the_group_commit_waits_for_its_fsync(tmp_path: Path) -> None:
    gate = threading.Event()
    entered = threading.Event()

    def slow_fsync(fd: int) -> None:
        entered.set()
        gate.wait(10)

    log = PartitionLog(tmp_path, threaded_settings(), fsync=slow_fsync)
    await log.start()
    idx = DedupIndex()
    first = asyncio.ensure_future(admit(log, idx, *batch(["a", "b"]), 1_000, window_of))
    retry = asyncio.ensure_future(admit(log, idx, *batch(["b", "a"]), 1_001, window_of))
    await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
    await asyncio.sleep(0.05)
    assert not first.done() and not retry.done()  # the copy is not durable: no answer yet
    assert log.durable_end_offset == 0
    gate.set()
    assert await first == (0, 1)
    assert await retry == Deduplicated([1, 0], [1, 0])
    assert stored_ids(log) == ["a", "b"]
    await log.stop()


async def test_the_retry_fails_when_the_first_copy_is_lost_to_an_io_error(tmp_path: Path) -> None:
    gate = threading.Event()

    def failing_fsync(fd: int) -> None:
        gate.wait(10)
        raise OSError(5, "EIO")

    log = PartitionLog(tmp_path, small_settings(), fsync=failing_fsync)
    await log.start()
    idx = DedupIndex()
    first = asyncio.ensure_future(admit(log, idx, *batch(["a"]), 1_000, window_of))
    retry = asyncio.ensure_future(admit(log, idx, *batch(["a"]), 1_001, window_of))
    await asyncio.sleep(0.05)
    gate.set()
    with pytest.raises(PartitionOfflineError):
        await first
    with pytest.raises(PartitionOfflineError):
        await retry
    with pytest.raises(PartitionOfflineError):
        await log.stop()


async def test_the_index_is_rebuilt_from_the_log_after_a_restart(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    idx = DedupIndex()
    for k in range(40):  # many batches over several segments, the older ones out of the window
        ts = 100_000 + k * 5_000
        await admit(log, idx, *batch([f"id{k}-{j}" for j in range(3)], ts=ts), ts, window_of)
    await log.stop()
    assert log.segment_count >= 3

    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    rebuilt = DedupIndex()
    now = 100_000 + 39 * 5_000 + 1
    seen = await rebuild(log, rebuilt, now, WINDOW, window_of)
    assert 0 < seen < 120  # only the tail covering the window was read
    assert rebuilt.lookup(1, b"id39-2", now, WINDOW) == (119, 2)
    assert rebuilt.lookup(1, b"id30-0", now, WINDOW) == (90, 0)
    assert rebuilt.lookup(1, b"id5-0", now, WINDOW) is None  # long out of the window
    answer = await admit(log, rebuilt, *batch(["id38-1", "new"], ts=now), now, window_of)
    assert answer == Deduplicated([115, 120], [1, 1])
    await log.stop()


async def test_rebuild_of_an_empty_or_old_log_finds_nothing(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    idx = DedupIndex()
    assert await rebuild(log, idx, 10_000, WINDOW, window_of) == 0
    await admit(log, idx, *batch(["a"], ts=1_000), 1_000, window_of)
    fresh = DedupIndex()
    assert await rebuild(log, fresh, 1_000 + 2 * WINDOW, WINDOW, window_of) == 0
    assert await rebuild(log, fresh, 1_000, 0, window_of) == 0 and len(fresh) == 0
    await log.stop()


async def test_rebuild_reads_at_most_the_last_max_records(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    idx = DedupIndex()
    for k in range(10):
        await admit(log, idx, *batch([f"r{k}-{j}" for j in range(3)], ts=1_000 + k), 1_000 + k, window_of)
    rebuilt = DedupIndex()
    seen = await rebuild(log, rebuilt, 2_000, WINDOW, window_of, max_records=7)  # offsets 23 to 29
    assert seen == 9  # whole batches are read (21 to 29); records before the bound are not indexed
    assert len(rebuilt) == 7
    assert rebuilt.lookup(1, b"r7-2", 2_000, WINDOW) == (23, 2) and rebuilt.lookup(1, b"r9-2", 2_000, WINDOW) == (29, 2)
    assert rebuilt.lookup(1, b"r7-1", 2_000, WINDOW) is None
    await log.stop()


async def test_offsets_a_full_disk_gave_back_are_forgotten(tmp_path: Path) -> None:
    """A full disk refuses a group and the log reuses its offsets: the index must not
    answer a retry with the coordinates of a record that was never stored."""
    full = threading.Event()
    full.set()

    def fsync(fd: int) -> None:
        if full.is_set():
            full.clear()
            raise OSError(errno.ENOSPC, "No space left on device")
        os.fdatasync(fd)

    log = PartitionLog(tmp_path, small_settings(), fsync=fsync)
    await log.start()
    idx = DedupIndex()
    log.on_rewind = idx.forget_from
    full.clear()
    assert await admit(log, idx, *batch(["x"]), 1_000, window_of) == (0, 0)
    full.set()
    with pytest.raises(DiskFullError):
        await admit(log, idx, *batch(["a", "b"]), 2_000, window_of)
    assert log.end_offset == 1 and len(idx) == 1  # "a" and "b" were given back
    assert await admit(log, idx, *batch(["a", "b"], tag="retry"), 3_000, window_of) == (1, 2)
    assert stored_ids(log) == ["x", "a", "b"]
    assert [r.value for r in read_all(log)][1:] == [b"retry-0", b"retry-1"]
    await log.stop()


def test_forget_from_drops_only_later_offsets() -> None:
    idx = DedupIndex()
    for q in (1, 2):
        for off in range(5):
            idx.add_stored(q, f"{q}-{off}".encode(), off * 2 + q, 0, 1_000, WINDOW)
    assert idx.forget_from(6) == 5  # queue 1 held 1, 3, 5, 7, 9; queue 2 held 2, 4, 6, 8, 10
    assert len(idx) == 5
    assert idx.lookup(1, b"1-2", 1_001, WINDOW) == (5, 0)
    assert idx.lookup(2, b"2-2", 1_001, WINDOW) is None
