"""Power loss under the real partition log and write node (``write_nodes.sim_disk``):
every acknowledged append survives a crash at any disk call, and the files and the
directory are fsynced before the first acknowledgement in a new segment."""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

from tests.write_nodes.helpers import make_records, read_all, small_settings
from vpq.load.powerloss import run_campaign
from vpq.write_nodes.errors import LogIOError
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.sim_disk import SimDisk

ROOT = Path("/sim")
PART = ROOT / "p0"


async def _appenders(log: PartitionLog, disk: SimDisk, acked: dict[bytes, int], seed: int) -> None:
    """Four concurrent appenders until the power fails; ``acked``: value -> offset."""

    async def one(tag: int) -> None:
        rng = random.Random(seed * 10 + tag)
        i = 0
        while not disk.down:
            records = make_records(f"s{seed}a{tag}n{i}", rng.randint(1, 3), size=rng.randint(20, 200))
            i += 1
            try:
                base, _ = await log.append(records)
            except LogIOError:
                return
            for k, record in enumerate(records):
                acked[record.value] = base + k

    await asyncio.gather(*(one(t) for t in range(4)))


async def _reboot(disk: SimDisk, log: PartitionLog) -> PartitionLog:
    with contextlib.suppress(LogIOError):
        await log.stop()
    disk.power_on()
    fresh = PartitionLog(PART, small_settings(checkpoint_interval_ms=20), storage=disk)
    await fresh.start()
    return fresh


def _assert_all_acked_present(log: PartitionLog, acked: dict[bytes, int]) -> None:
    found = {r.value: r.offset for r in read_all(log)}
    missing = {v: o for v, o in acked.items() if found.get(v) != o}
    assert not missing, f"{len(missing)} of {len(acked)} acknowledged records lost or moved"


async def test_acknowledged_appends_survive_a_power_loss_at_any_disk_call() -> None:
    for n in range(1, 81):
        disk = SimDisk(ROOT, seed=n)
        log = PartitionLog(PART, small_settings(checkpoint_interval_ms=20), storage=disk)
        await log.start()
        acked: dict[bytes, int] = {}
        disk.crash_after_ops(n, "lazy" if n % 2 else "strict")
        await _appenders(log, disk, acked, n)
        log = await _reboot(disk, log)
        _assert_all_acked_present(log, acked)
        await log.stop()


async def test_a_power_loss_during_recovery_loses_nothing_acknowledged() -> None:
    disk = SimDisk(ROOT, seed=3)
    log = PartitionLog(PART, small_settings(checkpoint_interval_ms=20), storage=disk)
    await log.start()
    acked: dict[bytes, int] = {}
    for n in range(1, 25):
        disk.crash_after_ops(7 + n % 11, "lazy")
        await _appenders(log, disk, acked, n)
        with contextlib.suppress(LogIOError):
            await log.stop()
        disk.power_on()
        disk.crash_after_ops(n)  # the restart's own recovery fails at its n-th disk call
        with contextlib.suppress(LogIOError):
            await PartitionLog(PART, small_settings(), storage=disk).start()
        disk.power_loss()  # in case recovery needed fewer calls
        disk.power_on()
        log = PartitionLog(PART, small_settings(checkpoint_interval_ms=20), storage=disk)
        await log.start()
        _assert_all_acked_present(log, acked)
    await log.stop()


async def test_first_ack_in_a_new_segment_follows_fsyncs_of_its_file_and_directory() -> None:
    disk = SimDisk(ROOT)
    log = PartitionLog(PART, small_settings(), storage=disk)
    await log.start()
    while log.segment_count == 1:
        await log.append(make_records("fill", 3, size=100))
    new_log = f"{PART}/{log._segments.active.base_offset:020d}.log"  # noqa: SLF001
    created = next(i for i, op in enumerate(disk.events) if op.kind == "create" and op.path == new_log)
    synced = {op.path for op in disk.events[created:] if op.kind == "fsync"}
    assert new_log in synced, "the new segment's data was not fsynced before its first acknowledgement"
    assert str(PART) in synced, "the new segment's name was not made durable (directory fsync)"
    assert f"{PART}/{0:020d}.index.tmp" in synced  # the rolled segment's index, before its rename
    # and so a power loss right after that acknowledgement keeps the record
    end = log.end_offset
    disk.power_loss()
    log = await _reboot(disk, log)
    assert log.end_offset == end
    await log.stop()


async def test_powerloss_campaign_through_a_real_write_node(tmp_path, redis_url, key_prefix) -> None:
    """The quick form of ``vpq bench powerloss``: HTTP producers, 12 crash points."""
    result = await run_campaign(tmp_path / "data", redis_url, 12, seed=5, producers=4, key_prefix=key_prefix)
    summary = result.summary()
    assert summary["crash_points"] == 12 and summary["acked"] > 0
    failed = [(r.point, r.check) for r in result.rounds if not r.check.ok]
    assert not failed
