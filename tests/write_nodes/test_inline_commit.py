"""Group commit on an idle loop: the loop writes and syncs a lone append itself."""

from __future__ import annotations

import asyncio
import errno
import threading
import time
from pathlib import Path

import pytest

from tests.write_nodes.helpers import make_records, read_all, small_settings
from vpq.write_nodes.completion_relay import CompletionRelay
from vpq.write_nodes.errors import DiskFullError, PartitionOfflineError
from vpq.write_nodes.group_commit import default_fsync
from vpq.write_nodes.log import PartitionLog


class ThreadOfFsync:
    """An fsync that records the thread of each call (and can fail once asked to)."""

    def __init__(self) -> None:
        self.on_loop: list[bool] = []
        self.fail = 0  # errno to fail with

    def __call__(self, fd: int) -> None:
        self.on_loop.append(threading.current_thread() is threading.main_thread())
        if self.fail:
            raise OSError(self.fail, "injected I/O error")
        default_fsync(fd)


def _log(tmp_path: Path, fsync: ThreadOfFsync, idle_ms: float = 50.0) -> PartitionLog:
    return PartitionLog(tmp_path, small_settings(segment_bytes=1 << 20, inline_commit_idle_ms=idle_ms), fsync=fsync)


async def _started(tmp_path: Path, idle_ms: float = 50.0) -> tuple[PartitionLog, ThreadOfFsync]:
    """A started log (inline after ``idle_ms`` of quiet) and its fsync recorder."""
    fsync = ThreadOfFsync()
    log = _log(tmp_path, fsync, idle_ms)
    await log.start()
    return log, fsync


async def _idle_log(tmp_path: Path) -> tuple[PartitionLog, ThreadOfFsync]:
    """``_started`` (50 ms), its loop then quiet for longer than that."""
    log, fsync = await _started(tmp_path)
    await _quiet()
    return log, fsync


async def _quiet(seconds: float = 0.06) -> None:
    """Let the loop's disks be idle for longer than the logs' ``inline_commit_idle_ms``."""
    await asyncio.sleep(seconds)


async def test_a_lone_append_on_an_idle_loop_is_synced_by_the_loop(tmp_path: Path) -> None:
    log, fsync = await _idle_log(tmp_path)
    pending = asyncio.ensure_future(log.append(make_records("a", 3)))
    await asyncio.sleep(0)  # the append ran up to its submit: written and synced by now
    assert fsync.on_loop == [True]
    assert await pending == (0, 2)
    assert log.durable_end_offset == 3
    assert log.committer.inline_groups == 1 and log.committer.groups == 1
    assert [r.offset for r in read_all(log)] == [0, 1, 2]
    await log.stop()


async def test_appends_close_together_go_to_the_io_thread(tmp_path: Path) -> None:
    log, fsync = await _idle_log(tmp_path)
    results = await asyncio.gather(*(log.append(make_records(f"n{i}", 2)) for i in range(20)))
    assert results == [(2 * i, 2 * i + 1) for i in range(20)]
    # the first found the loop idle; the rest came before its write was 50 ms old
    assert fsync.on_loop[0] is True and not any(fsync.on_loop[1:])
    assert log.committer.inline_groups == 1 and log.committer.writes == 20
    await log.stop()


async def test_one_busy_log_keeps_another_off_the_loop(tmp_path: Path) -> None:
    """The quiet is the loop's, not each log's: a write of any committer of the loop counts."""
    busy_fsync, idle_fsync = ThreadOfFsync(), ThreadOfFsync()
    busy, idle = _log(tmp_path / "busy", busy_fsync), _log(tmp_path / "idle", idle_fsync)
    await busy.start()
    await idle.start()
    await _quiet()
    await busy.append(make_records("b", 1))  # inline: the loop was idle
    await idle.append(make_records("i", 1))  # not: the busy log wrote just now
    assert busy_fsync.on_loop == [True] and idle_fsync.on_loop == [False]
    await busy.stop()
    await idle.stop()


async def test_zero_idle_never_writes_on_the_loop(tmp_path: Path) -> None:
    log, fsync = await _started(tmp_path, idle_ms=0)
    for i in range(3):
        await _quiet()
        await log.append(make_records(f"z{i}", 1))
    assert fsync.on_loop == [False, False, False]
    assert log.committer.inline_groups == 0
    await log.stop()


async def test_an_inline_fsync_error_takes_the_partition_offline(tmp_path: Path) -> None:
    log, fsync = await _idle_log(tmp_path)
    fsync.fail = errno.EIO
    with pytest.raises(PartitionOfflineError) as info:
        await log.append(make_records("x", 1))
    assert isinstance(info.value.__cause__, OSError)
    assert fsync.on_loop == [True]
    assert not log.online and log.durable_end_offset == 0
    with pytest.raises(PartitionOfflineError):
        await log.append(make_records("late", 1))
    with pytest.raises(PartitionOfflineError):
        await log.stop()  # the I/O thread ended; stop reports the error


class Abort(BaseException):
    """Stands for KeyboardInterrupt or SystemExit raised inside the write."""


async def test_a_base_exception_in_an_inline_write_goes_on_up_and_the_partition_goes_offline(
    tmp_path: Path,
) -> None:
    calls = []

    def aborting_fsync(fd: int) -> None:
        calls.append(threading.current_thread() is threading.main_thread())
        raise Abort()

    log = PartitionLog(tmp_path, small_settings(segment_bytes=1 << 20, inline_commit_idle_ms=50), fsync=aborting_fsync)
    await log.start()
    await _quiet()
    with pytest.raises(Abort):
        await log.append(make_records("x", 1))
    assert calls == [True]
    await asyncio.sleep(0)  # the offline transition posted before the raise
    assert not log.online
    with pytest.raises(PartitionOfflineError):
        await log.stop()


async def test_an_inline_write_to_a_full_disk_appends_nothing_and_the_log_goes_on(tmp_path: Path) -> None:
    log, fsync = await _idle_log(tmp_path)
    await log.append(make_records("a", 2))
    await _quiet()
    fsync.fail = errno.ENOSPC
    with pytest.raises(DiskFullError):
        await log.append(make_records("full", 3))
    assert fsync.on_loop[-1] is True
    fsync.fail = 0
    assert log.online and log.end_offset == 2  # the refused offsets are given back
    await _quiet()
    assert await log.append(make_records("b", 1)) == (2, 2)
    assert [r.key for r in read_all(log)] == [b"a-0", b"a-1", b"b-0"]
    await log.stop()


async def test_a_log_reopened_after_inline_appends_has_them_all(tmp_path: Path) -> None:
    log, fsync = await _started(tmp_path, idle_ms=1)
    for i in range(10):
        await asyncio.sleep(0.003)
        await log.append(make_records(f"r{i}", 2))
    assert log.committer.inline_groups >= 1
    await log.stop()
    reopened = PartitionLog(tmp_path, small_settings(segment_bytes=1 << 20))
    await reopened.start()
    assert [r.offset for r in read_all(reopened)] == list(range(20))
    await reopened.stop()


async def test_the_relay_tells_how_long_the_loops_disks_were_quiet() -> None:
    relay = CompletionRelay.of(asyncio.get_running_loop())
    relay.note_io()
    assert not relay.io_quiet_for(0.05)
    assert not relay.io_quiet_for(0)  # 0 means never
    time.sleep(0.06)
    assert relay.io_quiet_for(0.05)
    threading.Thread(target=relay.note_io).start()  # from an I/O thread too
    await asyncio.sleep(0.01)
    assert not relay.io_quiet_for(0.05)
