"""Group commit: shared fsyncs, acknowledgement only after fsync, error propagation, policies."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
from pathlib import Path

import pytest

from tests.write_nodes.helpers import make_records, read_all, small_settings, threaded_settings
from vpq.write_nodes.errors import PartitionOfflineError
from vpq.write_nodes.group_commit import default_fsync
from vpq.write_nodes.log import PartitionLog


class GatedFsync:
    """An fsync that counts calls and, while closed, blocks the I/O thread inside the call."""

    def __init__(self, open_: bool = True) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self._gate = threading.Event()
        if open_:
            self._gate.set()

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.entered.set()
        self._gate.wait()
        default_fsync(fd)

    def release(self) -> None:
        self._gate.set()


async def _wait_until(predicate, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


async def test_concurrent_appends_share_one_fsync(tmp_path: Path) -> None:
    fsync = GatedFsync(open_=False)
    log = PartitionLog(tmp_path, threaded_settings(segment_bytes=1 << 20), fsync=fsync)
    await log.start()
    first = asyncio.create_task(log.append(make_records("first", 1)))
    await asyncio.get_running_loop().run_in_executor(None, fsync.entered.wait)
    # the I/O thread is stuck in the first group's fsync: everything else queues up
    rest = [asyncio.create_task(log.append(make_records(f"n{i}", 2))) for i in range(100)]
    await asyncio.sleep(0)
    fsync.release()
    await asyncio.gather(first, *rest)
    assert fsync.calls == 2
    assert log.committer.groups == 2
    assert log.committer.writes == 101
    assert len(read_all(log)) == 201
    await log.stop()


async def test_acknowledged_and_readable_only_after_fsync(tmp_path: Path) -> None:
    fsync = GatedFsync(open_=False)
    log = PartitionLog(tmp_path, threaded_settings(segment_bytes=1 << 20), fsync=fsync)
    await log.start()
    task = asyncio.create_task(log.append(make_records("a", 3)))
    await asyncio.get_running_loop().run_in_executor(None, fsync.entered.wait)
    await asyncio.sleep(0.01)
    assert not task.done()
    assert log.end_offset == 3  # assigned ...
    assert log.durable_end_offset == 0  # ... but not durable, so not readable
    assert log.read(0, 1000) == b""
    assert log.offset_for_timestamp(0) is None
    fsync.release()
    assert await task == (0, 2)
    assert log.durable_end_offset == 3
    assert [r.offset for r in read_all(log)] == [0, 1, 2]
    await log.stop()


async def test_group_size_is_bounded_by_max_group_bytes(tmp_path: Path) -> None:
    fsync = GatedFsync(open_=False)
    log = PartitionLog(
        tmp_path, threaded_settings(segment_bytes=1 << 20, max_group_bytes=4096), fsync=fsync, history_size=100
    )
    await log.start()
    first = asyncio.create_task(log.append(make_records("first", 1)))
    await asyncio.get_running_loop().run_in_executor(None, fsync.entered.wait)
    rest = [asyncio.create_task(log.append(make_records(f"n{i}", 10, size=100))) for i in range(20)]
    await asyncio.sleep(0)
    fsync.release()
    await asyncio.gather(first, *rest)
    history = log.committer.history_snapshot()
    assert sum(n for n, _ in history) == log.size_bytes
    assert all(n <= 4096 for n, _ in history)
    assert len(history) > 2
    await log.stop()


async def test_fsync_error_takes_the_partition_offline(tmp_path: Path) -> None:
    calls = [0]

    def failing_fsync(fd: int) -> None:
        calls[0] += 1
        if calls[0] >= 3:
            raise OSError(errno.EIO, "injected I/O error")
        default_fsync(fd)

    log = PartitionLog(tmp_path, small_settings(segment_bytes=1 << 20), fsync=failing_fsync)
    await log.start()
    acked = [await log.append(make_records("ok", 2)) for _ in range(2)]
    results = await asyncio.gather(*(log.append(make_records(f"x{i}", 1)) for i in range(10)), return_exceptions=True)
    assert all(isinstance(r, PartitionOfflineError) for r in results)
    assert isinstance(results[0].__cause__, OSError)  # type: ignore[union-attr]
    assert not log.online
    with pytest.raises(PartitionOfflineError):
        await log.append(make_records("late", 1))
    with pytest.raises(PartitionOfflineError):
        log.read(0, 100)
    with pytest.raises(PartitionOfflineError):
        await log.stop()
    # a restart recovers: every acknowledged append is there
    log = PartitionLog(tmp_path, small_settings(segment_bytes=1 << 20))
    await log.start()
    records = read_all(log)
    assert [r.offset for r in records[:4]] == [0, 1, 2, 3]
    assert acked == [(0, 1), (2, 3)]
    await log.stop()


async def test_write_error_takes_the_partition_offline(tmp_path: Path) -> None:
    log = PartitionLog(tmp_path, small_settings(segment_bytes=1 << 20))
    await log.start()
    await log.append(make_records("ok", 1))
    # the data file's descriptor goes bad under the log: the next writev fails
    active_fd = log._segments.active.fd  # type: ignore[union-attr]
    replacement = os.open(os.devnull, os.O_RDONLY)
    os.dup2(replacement, active_fd)
    os.close(replacement)
    with pytest.raises(PartitionOfflineError):
        await log.append(make_records("bad", 1))
    assert not log.online
    with pytest.raises(PartitionOfflineError):
        await log.stop()


async def test_interval_policy_acks_before_fsync(tmp_path: Path) -> None:
    fsync = GatedFsync()
    settings = small_settings(segment_bytes=1 << 20, fsync_policy="interval", fsync_interval_ms=3_600_000)
    log = PartitionLog(tmp_path, settings, fsync=fsync)
    await log.start()
    await asyncio.gather(*(log.append(make_records(f"i{i}", 2)) for i in range(20)))
    assert fsync.calls == 0
    assert len(read_all(log)) == 40  # written: readable under this policy
    await log.committer.sync_now()
    assert fsync.calls >= 1
    await log.stop()


async def test_interval_policy_timer_fsyncs(tmp_path: Path) -> None:
    fsync = GatedFsync()
    settings = small_settings(segment_bytes=1 << 20, fsync_policy="interval", fsync_interval_ms=10)
    log = PartitionLog(tmp_path, settings, fsync=fsync)
    await log.start()
    await log.append(make_records("i", 2))
    await _wait_until(lambda: fsync.calls >= 1)
    await log.stop()


async def test_none_policy_fsyncs_only_on_stop(tmp_path: Path) -> None:
    fsync = GatedFsync()
    log = PartitionLog(tmp_path, small_settings(segment_bytes=1 << 20, fsync_policy="none"), fsync=fsync)
    await log.start()
    await asyncio.gather(*(log.append(make_records(f"n{i}", 2)) for i in range(20)))
    assert fsync.calls == 0
    await log.stop()
    assert fsync.calls >= 1
