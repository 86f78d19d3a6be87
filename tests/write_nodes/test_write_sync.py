"""A synced group of plain appends written and fdatasynced in one call (``write_sync``)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from tests.write_nodes.helpers import make_records, read_all, small_settings, threaded_settings
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.storage import OS_STORAGE, OsStorage


class CountingWriteSync:
    """``OsStorage.write_all_dsync`` counting calls; while closed it blocks inside the call
    before writing anything."""

    def __init__(self, open_: bool = True) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self._gate = threading.Event()
        if open_:
            self._gate.set()

    def __call__(self, fd: int, buffers: list[bytes]) -> int:
        self.calls += 1
        self.entered.set()
        self._gate.wait()
        return OS_STORAGE.write_all_dsync(fd, buffers)

    def release(self) -> None:
        self._gate.set()


class CountingFsync:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fd: int) -> None:
        self.calls += 1
        OS_STORAGE.fdatasync(fd)


def test_os_write_all_dsync_appends_at_the_end(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        assert OS_STORAGE.write_all(fd, [b"abc"]) == 3
        assert OS_STORAGE.write_all_dsync(fd, [b"de", b"", b"f"]) == 3
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_bytes() == b"abcdef"


def test_a_storage_that_overrides_its_sync_keeps_it(tmp_path: Path) -> None:
    calls: list[str] = []

    class Slow(OsStorage):
        def write_all(self, fd: int, buffers: Sequence[bytes]) -> int:
            calls.append("write")
            return super().write_all(fd, buffers)

        def fdatasync(self, fd: int) -> None:
            calls.append("sync")
            super().fdatasync(fd)

    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        Slow().write_all_dsync(fd, [b"x"])
    finally:
        os.close(fd)
    assert calls == ["write", "sync"]


async def test_a_group_of_appends_is_one_write_sync_and_acked_after_it(tmp_path: Path) -> None:
    write_sync, fsync = CountingWriteSync(open_=False), CountingFsync()
    log = PartitionLog(tmp_path, threaded_settings(segment_bytes=1 << 20), fsync=fsync, write_sync=write_sync)
    await log.start()
    first = asyncio.create_task(log.append(make_records("first", 1)))
    await asyncio.get_running_loop().run_in_executor(None, write_sync.entered.wait)
    rest = [asyncio.create_task(log.append(make_records(f"n{i}", 2))) for i in range(50)]
    await asyncio.sleep(0.01)
    assert not first.done() and log.durable_end_offset == 0  # not acknowledged before the call returns
    write_sync.release()
    await asyncio.gather(first, *rest)
    assert write_sync.calls == 2 and fsync.calls == 0
    assert log.committer.fsyncs == 2 and log.committer.groups == 2
    assert len(read_all(log)) == 101
    await log.stop()


async def test_a_group_that_rolls_a_segment_fsyncs_as_before(tmp_path: Path) -> None:
    write_sync, fsync = CountingWriteSync(), CountingFsync()
    log = PartitionLog(tmp_path, small_settings(), fsync=fsync, write_sync=write_sync)
    await log.start()
    for i in range(20):  # every few appends roll a segment: the new file's group syncs the directory too
        await log.append(make_records(f"r{i}", 2, size=700))
    assert log.segment_count > 2
    assert fsync.calls > 0 and write_sync.calls > 0
    assert [r.offset for r in read_all(log)] == list(range(40))
    await log.stop()
    reopened = PartitionLog(tmp_path, small_settings())
    await reopened.start()
    assert reopened.end_offset == 40
    await reopened.stop()


async def test_a_log_with_its_own_fsync_gets_no_write_sync_by_default(tmp_path: Path) -> None:
    fsync = CountingFsync()
    log = PartitionLog(tmp_path, small_settings(segment_bytes=1 << 20), fsync=fsync)
    await log.start()
    await log.append(make_records("a", 2))
    assert fsync.calls == 1
    await log.stop()
