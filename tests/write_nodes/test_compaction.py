"""Compaction of the partition log (real files, and the simulated disk for crashes):
offsets stay stable, reads of compacted-away offsets go to the next surviving one,
recovery accepts the gaps, appends and reads go on during it, a crash at any disk
call loses nothing, and per-queue retention keeps or frees segments."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from tests.write_nodes.helpers import small_settings
from vpq.codec.records import Record, decode_batches
from vpq.write_nodes import filenames
from vpq.write_nodes.errors import LogIOError
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.retention import QueuePolicy
from vpq.write_nodes.sim_disk import SimDisk

LIVE, GONE, SHORT = 1, 2, 3
NOW = 10_000_000


def recs(queue_id: int, tag: str, n: int, size: int = 60, ts: int | None = None) -> list[Record]:
    return [
        Record(value=(f"{tag}-{i}-".encode() * size)[:size], queue_id=queue_id, key=f"{tag}-{i}".encode(), timestamp_ms=ts)
        for i in range(n)
    ]


def read_everything(log: PartitionLog, start: int | None = None, max_bytes: int = 900) -> list[Record]:
    """Every readable record from ``start``, CRC-checked; offsets strictly increase and
    each read resumes at or after where the reader is (gaps allowed)."""
    cursor = log.start_offset if start is None else start
    out: list[Record] = []
    while True:
        data = log.read(cursor, max_bytes)
        if not data:
            return out
        fresh = [r for r in decode_batches(data, verify=True) if r.offset >= cursor]
        assert fresh, f"a read at {cursor} gave nothing new"
        out.extend(fresh)
        cursor = fresh[-1].offset + 1


def policy(**retention: int) -> QueuePolicy:
    """LIVE lives with no limit, GONE is deleted, SHORT keeps ``short`` ms."""
    r = {LIVE: -1}
    if "short" in retention:
        r[SHORT] = retention["short"]
    return QueuePolicy(r, known_below=10)


async def _fill(log: PartitionLog, rounds: int, *, mixed: bool = False) -> dict[bytes, int]:
    """Appends where GONE holds about 90 % of the bytes; returns LIVE's value -> offset."""
    live: dict[bytes, int] = {}
    for i in range(rounds):
        if mixed:
            batch = recs(GONE, f"g{i}", 4) + recs(LIVE, f"l{i}", 1) + recs(GONE, f"h{i}", 5)
            base, _ = await log.append(batch)
            live[batch[4].value] = base + 4
        else:
            await log.append(recs(GONE, f"g{i}", 9))
            batch = recs(LIVE, f"l{i}", 1)
            base, _ = await log.append(batch)
            live[batch[0].value] = base
    await log.checkpoint()
    return live


def _live_offsets(log: PartitionLog) -> dict[bytes, int]:
    return {r.value: r.offset for r in read_everything(log) if r.queue_id == LIVE}


async def test_compaction_frees_a_deleted_queue_and_keeps_offsets(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    live = await _fill(log, 60)
    before = log.size_bytes
    end = log.end_offset
    done = await log.compact(policy(), NOW)
    assert done.segments >= 1
    assert log.size_bytes <= 0.2 * before, (log.size_bytes, before)
    assert _live_offsets(log) == live
    assert log.end_offset == end
    # a read at an offset compacted away starts at the next surviving offset
    gone_offset = next(o for o in range(end) if o not in set(live.values()))
    first = decode_batches(log.read(gone_offset, 100))
    assert first and min(r.offset for r in first if r.offset >= gone_offset) == min(o for o in live.values() if o > gone_offset)
    # appends go on at the same end
    base, _ = await log.append(recs(LIVE, "after", 1))
    assert base == end
    await log.stop()
    # recovery accepts the gaps (trusted and scanned paths), rebuilt indexes agree
    for drop_checkpoint in (False, True):
        if drop_checkpoint:
            filenames.checkpoint_file(tmp_path).unlink()
            for p in tmp_path.glob("*.index"):
                p.unlink()
        again = PartitionLog(tmp_path, small_settings())
        report = await again.start()
        assert report.problem is None
        assert report.recovered_end_offset == end + 1
        got = _live_offsets(again)
        assert {v: got[v] for v in live} == live
        await again.stop()


async def test_mixed_batches_are_split_at_their_records_offsets(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    live = await _fill(log, 40, mixed=True)
    before = log.size_bytes
    await log.compact(policy(), NOW)
    assert log.size_bytes < 0.3 * before
    records = read_everything(log)
    assert {r.value: r.offset for r in records if r.queue_id == LIVE} == live
    assert all(r.queue_id == LIVE for r in records if r.offset < min(s.base_offset for s in [log._segments.active]))  # noqa: SLF001
    await log.stop()


async def test_appends_and_reads_go_on_during_compaction(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    live = await _fill(log, 80)
    stop = asyncio.Event()
    appended: dict[bytes, int] = {}
    reads = 0

    async def appender() -> None:
        i = 0
        while not stop.is_set():
            batch = recs(LIVE, f"during{i}", 1)
            base, _ = await log.append(batch)
            appended[batch[0].value] = base
            i += 1
            await asyncio.sleep(0)

    async def reader() -> None:
        nonlocal reads
        while not stop.is_set():
            got = {r.value: r.offset for r in read_everything(log) if r.queue_id == LIVE}
            assert all(got.get(v) == o for v, o in live.items())
            reads += 1
            await asyncio.sleep(0)

    tasks = [asyncio.create_task(appender()), asyncio.create_task(reader())]
    await asyncio.sleep(0.01)
    done = await log.compact(policy(), NOW)
    stop.set()
    await asyncio.gather(*tasks)
    assert done.segments >= 1 and reads > 0 and appended
    assert _live_offsets(log) == {**live, **appended}
    await log.stop()


async def test_segment_kept_while_a_queue_in_it_is_within_retention(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings(retention_ms=1000), clock_ms=lambda: NOW)
    await log.start()
    for i in range(30):  # old records of LIVE (log retention) and young ones of SHORT
        await log.append(recs(LIVE, f"old{i}", 3, ts=NOW - 5000))
        await log.append(recs(SHORT, f"young{i}", 1, ts=NOW - 5000))
    await log.checkpoint()
    segments = log.segment_count
    await log.compact(policy(short=60_000), NOW - 4900)  # SHORT within its 60 s: nothing dead
    assert log.apply_retention(NOW) == 0, "SHORT's records are within its retention"
    assert log.segment_count == segments
    await log.compact(policy(short=60_000), NOW)
    assert log.apply_retention(NOW + 50_000) == 0
    # past SHORT's retention (its newest record is 61 s old) every queue lets them go
    assert log.apply_retention(NOW + 56_000) == segments - 1
    await log.stop()


async def test_compaction_drops_records_past_their_queues_retention(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    keep: dict[bytes, int] = {}
    for i in range(40):
        await log.append(recs(SHORT, f"s{i}", 8, ts=NOW - 10_000))
        batch = recs(LIVE, f"l{i}", 1, ts=NOW - 10_000)
        base, _ = await log.append(batch)
        keep[batch[0].value] = base
    await log.checkpoint()
    await log.compact(policy(short=20_000), NOW)
    assert any(r.queue_id == SHORT for r in read_everything(log)), "within retention: kept"
    await log.compact(policy(short=5_000), NOW)
    records = read_everything(log)
    assert _live_offsets(log) == keep
    assert not any(r.queue_id == SHORT for r in records if r.offset < log._segments.active.base_offset)  # noqa: SLF001
    await log.stop()


ROOT = Path("/sim")
PART = ROOT / "p0"


async def test_a_power_loss_at_any_disk_call_of_a_compaction_loses_nothing() -> None:
    n = 0
    finished = False
    while not finished:
        n += 1
        disk = SimDisk(ROOT, seed=n)
        log = PartitionLog(PART, small_settings(), storage=disk)
        await log.start()
        live = await _fill(log, 30, mixed=n % 2 == 0)
        end = log.end_offset
        disk.crash_after_ops(n, "lazy" if n % 3 else "strict")
        try:
            await log.compact(policy(), NOW)
            finished = not disk.down
        except LogIOError:
            pass
        with contextlib.suppress(LogIOError):
            await log.stop()
        disk.power_loss()
        disk.power_on()
        again = PartitionLog(PART, small_settings(), storage=disk)
        report = await again.start()
        assert report.problem is None, (n, report.problem)
        assert report.recovered_end_offset == end
        assert _live_offsets(again) == live, f"crash after {n} disk calls of a compaction lost records"
        # and the recovered log compacts and serves the same
        await again.compact(policy(), NOW)
        assert _live_offsets(again) == live
        await again.stop()
    assert n > 10


async def test_a_full_disk_abandons_the_compaction_and_keeps_the_partition_online(tmp_path: Path) -> None:
    import errno

    from vpq.write_nodes.storage import OsStorage

    class FullDisk(OsStorage):
        full = False

        def write_all(self, fd: int, buffers):  # type: ignore[no-untyped-def]
            if self.full:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write_all(fd, buffers)

    storage = FullDisk()
    log = PartitionLog(tmp_path, small_settings(), storage=storage, fsync=lambda fd: None)
    await log.start()
    live = await _fill(log, 30)
    storage.full = True
    done = await log.compact(policy(), NOW)
    assert done.segments == 0 and log.online
    assert not list(tmp_path.glob("*.tmp"))
    assert _live_offsets(log) == live
    storage.full = False
    assert (await log.compact(policy(), NOW)).segments >= 1
    assert _live_offsets(log) == live
    await log.stop()


async def test_retention_deleting_segments_during_a_pass_does_not_upset_it(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings(retention_bytes=0))
    await log.start()
    live = await _fill(log, 60)
    log.retention_waits_for_policy = True  # nothing deleted before the pass starts
    await log.compact(QueuePolicy({LIVE: -1, GONE: -1}, 10), NOW)  # summaries of every segment, nothing dead
    log._policy = None  # noqa: SLF001 - and no deletion until the next pass starts

    done = asyncio.Event()

    async def retention_meanwhile() -> int:
        deleted = 0
        while not done.is_set():
            await asyncio.sleep(0.0005)
            if log._policy is not None:  # noqa: SLF001 - the pass has begun
                deleted += log.apply_retention(NOW)
        return deleted

    task = asyncio.create_task(retention_meanwhile())
    await log.compact(policy(), NOW)
    done.set()
    deleted = await task
    assert log.online and deleted > 0
    got = _live_offsets(log)
    assert all(got[v] == o for v, o in live.items() if v in got)
    assert not [o for v, o in live.items() if v not in got and o >= log.start_offset]
    await log.stop()


async def test_a_damaged_batch_is_never_rewritten_with_a_fresh_crc(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    await _fill(log, 40, mixed=True)
    first = filenames.log_file(tmp_path, 0)
    size = first.stat().st_size
    with open(first, "r+b") as f:  # flip a value byte of the first (mixed) batch
        f.seek(200)
        b = f.read(1)
        f.seek(200)
        f.write(bytes([b[0] ^ 0xFF]))
    done = await log.compact(policy(), NOW)
    assert log.online and done.segments >= 1
    assert first.stat().st_size == size, "the damaged segment was rewritten"
    assert not filenames.compacted_file(tmp_path, 0).exists()
    await log.stop()


async def test_a_rewritten_batch_keeps_every_field_of_its_live_records(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings())
    await log.start()
    originals: list[Record] = []
    for b in range(30):
        batch = [
            Record(
                value=f"v{b}-{i}".encode() * (1 + i % 5),
                queue_id=LIVE if i % 3 == 1 else GONE,
                virtual_partition=i % 7,
                key_hash=b * 100 + i,
                context_id=i % 4,
                key=None if i % 4 == 0 else f"key{b}-{i}".encode(),
                headers=(("h", f"{i}".encode()),) if i % 2 else (),
                value_encoding=i % 2,
                timestamp_ms=NOW - 1000 + i * 7,
            )
            for i in range(12)
        ]
        base, _ = await log.append(batch)
        originals += [
            Record(**{**{f: getattr(r, f) for f in ("value", "queue_id", "virtual_partition", "key_hash",
                                                    "context_id", "key", "headers", "value_encoding",
                                                    "timestamp_ms")}, "offset": base + i})
            for i, r in enumerate(batch) if r.queue_id == LIVE
        ]
    await log.checkpoint()
    await log.compact(policy(), NOW)
    assert log.compactions.segments >= 1
    got = {r.offset: r for r in read_everything(log) if r.queue_id == LIVE}
    fields = ("value", "virtual_partition", "key_hash", "context_id", "key", "headers", "value_encoding", "timestamp_ms")
    for want in originals:
        have = got[want.offset]
        assert {f: getattr(have, f) for f in fields} == {f: getattr(want, f) for f in fields}, want.offset
    await log.stop()
