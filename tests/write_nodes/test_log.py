"""PartitionLog: appends, reads across segment rolls, timestamps, retention, restarts."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from pathlib import Path

import pytest

from tests.write_nodes.helpers import make_records, read_all, small_settings
from vpq.codec.columnar import MAGIC_COLUMNAR, build_columnar_batch, columns_of
from vpq.codec.records import BatchView, Record, iter_batches
from vpq.write_nodes import filenames
from vpq.write_nodes.checkpoint import read_checkpoint
from vpq.write_nodes.errors import OffsetOutOfRangeError, PartitionOfflineError
from vpq.write_nodes.log import PartitionLog


async def _fill(log: PartitionLog, batches: int, per_batch: int = 3) -> list[bytes]:
    values: list[bytes] = []
    for i in range(batches):
        recs = make_records(f"b{i}", per_batch)
        base, last = await log.append(recs)
        assert (base, last) == (len(values), len(values) + per_batch - 1)
        values += [r.value for r in recs]
    return values


async def test_append_and_read_across_segment_rolls(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    report = await log.start()
    assert report.recovered_end_offset == 0 and report.problem is None
    values = await _fill(log, 120)
    assert log.segment_count > 3
    assert log.end_offset == log.durable_end_offset == len(values)
    assert [r.value for r in read_all(log)] == values
    assert [r.offset for r in read_all(log)] == list(range(len(values)))
    # any offset: the first returned batch contains it; whole batches only
    rng = random.Random(1)
    for _ in range(50):
        offset = rng.randrange(len(values))
        data = log.read(offset, rng.choice([1, 100, 2000]))
        views = list(iter_batches(data, verify=True))
        assert views[0].base_offset <= offset <= views[0].last_offset
        assert sum(v.size for v in views) == len(data)
        assert {v.magic for v in views} == {MAGIC_COLUMNAR}  # append writes magic 2, as the product does
    assert len(list(iter_batches(log.read(0, 1)))) == 1  # at least one batch, even over max_bytes
    assert log.read(len(values), 1000) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(len(values) + 1, 1000)
    await log.stop()


async def test_concurrent_appends_get_distinct_ordered_offsets(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    results = await asyncio.gather(*(log.append(make_records(f"c{i}", 1 + i % 4)) for i in range(60)))
    spans = sorted(results)
    assert spans[0][0] == 0
    for (_, last), (base, _) in zip(spans, spans[1:]):
        assert base == last + 1
    # call order is offset order
    assert [r[0] for r in results] == [s[0] for s in spans]
    records = read_all(log)
    for i, (base, last) in enumerate(results):
        assert [r.value for r in records[base : last + 1]] == [r.value for r in make_records(f"c{i}", 1 + i % 4)]
    await log.stop()


async def test_restart_keeps_everything_and_continues(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    values = await _fill(log, 80)
    await log.stop()
    log = PartitionLog(tmp_path, small_settings())
    report = await log.start()
    assert report.problem is None and report.bytes_truncated == 0
    assert report.recovered_end_offset == len(values)
    assert report.segments_trusted == log.segment_count - 1 > 0
    assert [r.value for r in read_all(log)] == values
    more = make_records("after", 5)
    assert await log.append(more) == (len(values), len(values) + 4)
    await log.stop()
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    assert [r.value for r in read_all(log)] == values + [r.value for r in more]
    await log.stop()


async def test_damaged_index_files_of_trusted_segments_are_rebuilt(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    values = await _fill(log, 80)
    await log.stop()
    rng = random.Random(3)
    for i, path in enumerate(sorted(tmp_path.glob("*.index")) + sorted(tmp_path.glob("*.timeindex"))):
        if i % 3 == 0:
            path.write_bytes(rng.randbytes(13))
        elif i % 3 == 1:
            path.unlink()
        else:
            path.write_bytes(path.read_bytes()[::-1])
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    assert [r.value for r in read_all(log)] == values
    for _ in range(30):
        offset = rng.randrange(len(values))
        view = BatchView(log.read(offset, 1))
        assert view.base_offset <= offset <= view.last_offset
    await log.stop()


async def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    for i in range(60):  # batch i holds offsets 2i, 2i+1 with timestamps 1000 + 10i
        await log.append(make_records(f"t{i}", 2), timestamp_ms=1000 + 10 * i)
    assert log.segment_count > 2

    async def check() -> None:
        assert log.offset_for_timestamp(0) == 0
        assert log.offset_for_timestamp(1000) == 0
        assert log.offset_for_timestamp(1001) == 2
        assert log.offset_for_timestamp(1250) == 50
        assert log.offset_for_timestamp(1255) == 52
        assert log.offset_for_timestamp(1590) == 118
        assert log.offset_for_timestamp(1591) is None

    await check()
    await log.stop()
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    await check()  # from the index files of the trusted segments
    await log.stop()


async def test_per_record_timestamps_are_kept(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    recs = [Record(value=b"a", timestamp_ms=5000), Record(value=b"b"), Record(value=b"c", timestamp_ms=7000)]
    await log.append(recs, timestamp_ms=6000)
    assert [r.timestamp_ms for r in read_all(log)] == [5000, 6000, 7000]
    assert log.offset_for_timestamp(6500) == 2
    await log.stop()


async def test_retention_by_size(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings(retention_bytes=10_000))
    await log.start()
    values = await _fill(log, 150)
    before = log.segment_count
    deleted = log.apply_retention()
    assert deleted > 0 and log.segment_count == before - deleted
    assert log.size_bytes >= 10_000
    assert log.start_offset > 0
    kept = read_all(log)
    assert kept[0].offset == log.start_offset
    assert [r.value for r in kept] == values[log.start_offset :]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert log.apply_retention() == 0
    await log.stop()
    log = PartitionLog(tmp_path, small_settings(retention_bytes=10_000))
    report = await log.start()
    assert report.start_offset == log.start_offset == kept[0].offset
    await log.stop()


async def test_retention_by_age_never_deletes_the_active_segment(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings(retention_ms=1000))
    await log.start()
    for i in range(50):
        await log.append(make_records(f"a{i}", 3), timestamp_ms=10_000 + 100 * i)
    segments = log.segment_count
    assert log.apply_retention(now_ms=10_000) == 0
    partial = log.apply_retention(now_ms=13_000)
    assert 0 < partial < segments - 1
    # batch i (offsets 3i..3i+2) has timestamp 10_000 + 100 i: deleted segments are all
    # older than 13_000 - 1000, the first kept one has a record at least that recent
    ts_of = lambda offset: 10_000 + 100 * (offset // 3)  # noqa: E731
    bases = filenames.list_segment_bases(tmp_path)
    assert bases[0] == log.start_offset
    assert ts_of(log.start_offset - 1) < 12_000
    assert ts_of(bases[1] - 1) >= 12_000
    assert read_all(log)[0].offset == log.start_offset
    remaining = log.segment_count
    assert log.apply_retention(now_ms=10**9) == remaining - 1
    assert log.segment_count == 1
    assert read_all(log)[-1].offset == log.end_offset - 1
    await log.stop()


async def test_segment_roll_by_age(tmp_path: Path) -> None:
    now = [1_000_000]
    log = PartitionLog(tmp_path, small_settings(segment_bytes=1 << 20, segment_ms=500), clock_ms=lambda: now[0])
    await log.start()
    await log.append(make_records("x", 1))
    await log.append(make_records("y", 1))
    assert log.segment_count == 1
    now[0] += 500
    await log.append(make_records("z", 1))
    assert log.segment_count == 2
    assert sorted(filenames.list_segment_bases(tmp_path)) == [0, 2]
    await log.stop()


async def test_wait_for(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    assert not await log.wait_for(0, 0.01)
    waiter = asyncio.create_task(log.wait_for(0, 30))
    await asyncio.sleep(0)
    assert not waiter.done()
    await log.append(make_records("w", 1))
    assert await waiter
    assert await log.wait_for(0, 0)
    stopped = asyncio.create_task(log.wait_for(5, 30))
    await asyncio.sleep(0)
    await log.stop()
    assert not await stopped


async def test_submit_checked_restamps_a_prebuilt_batch(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    await log.append(make_records("first", 2))
    batch = build_columnar_batch(0, 1234, columns_of(make_records("pre", 3), 1234))
    assert await log.submit_checked(batch, BatchView(batch, 0)) == (2, 4)
    records = read_all(log)
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert [r.value for r in records[2:]] == [r.value for r in make_records("pre", 3)]
    with pytest.raises(ValueError):  # the view must cover exactly the batch
        log.submit_checked(batch + batch, BatchView(batch, 0))
    with pytest.raises(ValueError):
        await log.append([])
    assert log.end_offset == 5
    await log.stop()


async def test_not_started_or_stopped_log_refuses(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    with pytest.raises(PartitionOfflineError):
        await log.append(make_records("x", 1))
    await log.start()
    await log.append(make_records("x", 1))
    await log.stop()
    with pytest.raises(PartitionOfflineError):
        log.read(0, 100)
    assert not log.online


async def test_recovery_point_checkpoints(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings(checkpoint_interval_ms=10))
    await log.start()
    await _fill(log, 30)
    assert await log.checkpoint() == log.durable_end_offset == 90
    assert read_checkpoint(tmp_path) == 90
    await _fill_more(log, 5)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while read_checkpoint(tmp_path) != log.durable_end_offset:  # the periodic checkpoint catches up
        assert loop.time() < deadline
        await asyncio.sleep(0.01)
    await log.stop()
    assert read_checkpoint(tmp_path) == 105


async def _fill_more(log: PartitionLog, batches: int) -> None:
    for i in range(batches):
        await log.append(make_records(f"more{i}", 3))


async def test_checkpoints_never_write_the_file_concurrently(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The periodic checkpoint and an explicit one share one tmp file name: two threads
    writing it at once made one rename fail and took the partition offline."""
    import vpq.write_nodes.log as log_module

    real = log_module.write_checkpoint
    active = {"now": 0, "max": 0}
    lock = threading.Lock()

    def slow_write(directory: Path, point: int, *storage: object) -> None:
        with lock:
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
        time.sleep(0.02)
        try:
            real(directory, point, *storage)
        finally:
            with lock:
                active["now"] -= 1

    monkeypatch.setattr(log_module, "write_checkpoint", slow_write)
    log = PartitionLog(tmp_path, small_settings(checkpoint_interval_ms=10))
    await log.start()
    for i in range(5):
        await _fill_more(log, 1)
        await asyncio.gather(log.checkpoint(), log.checkpoint(), asyncio.sleep(0.01))
    await log.stop()
    assert active["max"] == 1  # stop() raised had the partition gone offline
    assert read_checkpoint(tmp_path) == log.durable_end_offset
