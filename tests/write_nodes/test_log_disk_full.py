"""A full disk refuses appends without taking the log offline (``write_nodes.group_commit``).

On a real, tiny tmpfs the kernel's own ENOSPC: the refused appends (the failing group and
everything queued behind it) raise ``DiskFullError``, nothing of them stays in the
segment files, the log stays online and readable, and once space returns appends go on
from the first refused offset; a restart recovers exactly the acknowledged appends. A
storage that writes part of a group before failing checks the truncation of a torn write.
"""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.needs import missing
from tests.write_nodes.helpers import make_records, read_all, small_settings
from vpq.write_nodes.errors import DiskFullError
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.storage import OsStorage


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "fs"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        missing(f"cannot mount a tmpfs for the disk-full test (needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def segment_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.log"))


async def fill(log: PartitionLog, tag: str) -> tuple[list[tuple[int, int]], int]:
    """Append waves of 8 concurrent batches until the disk refuses some; the offsets of
    the accepted ones and how many were refused."""
    acked: list[tuple[int, int]] = []
    refused = 0
    for wave in range(10_000):
        results = await asyncio.gather(
            *(log.append(make_records(f"{tag}{wave}-{i}", 20, size=200)) for i in range(8)), return_exceptions=True
        )
        for r in results:
            if isinstance(r, DiskFullError):
                refused += 1
            elif isinstance(r, BaseException):
                raise r
            else:
                acked.append(r)
        if refused:
            return acked, refused
    raise AssertionError("the disk never filled")


async def test_real_enospc_refuses_appends_and_the_log_stays_online(tiny_fs: Path) -> None:
    ballast = tiny_fs / "ballast"
    ballast.write_bytes(b"\0" * (256 << 10))
    directory = tiny_fs / "pp-0"
    settings = small_settings(segment_bytes=64 << 20, index_interval_bytes=4096)
    log = PartitionLog(directory, settings)
    await log.start()
    acked, refused = await fill(log, "a")
    assert acked and refused
    assert log.online
    end = log.end_offset
    assert end == log.durable_end_offset == acked[-1][1] + 1  # nothing refused is placed
    assert [r.offset for r in read_all(log, max_bytes=1 << 20)] == list(range(end))
    size = segment_bytes(directory)
    assert log.committer.disk_full >= 1
    with pytest.raises(DiskFullError):  # still full: refused again, still online
        await log.append(make_records("b", 20, size=2000))
    assert log.online and log.end_offset == end and segment_bytes(directory) == size

    ballast.unlink()  # space returns
    base, last = await log.append(make_records("c", 10))
    assert base == end and last == end + 9
    assert [r.offset for r in read_all(log, max_bytes=1 << 20)] == list(range(end + 10))
    await log.stop()

    again = PartitionLog(directory, settings)
    report = await again.start()
    assert report.recovered_end_offset == end + 10 and report.bytes_truncated == 0
    await again.stop()


class TornWrites(OsStorage):
    """The real file system, but while ``full`` each write puts half its first buffer on
    disk and then fails with ENOSPC, like a disk that ran out in the middle."""

    def __init__(self) -> None:
        self.full = False

    def write_all(self, fd: int, buffers: Sequence[bytes]) -> int:
        if self.full:
            os.write(fd, buffers[0][: len(buffers[0]) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write_all(fd, buffers)


async def test_a_torn_write_is_cut_back_and_appends_resume(tmp_path: Path) -> None:
    storage = TornWrites()
    settings = small_settings(segment_bytes=1 << 20)
    log = PartitionLog(tmp_path / "pp-1", settings, storage=storage)
    await log.start()
    first = await log.append(make_records("a", 5))
    size = segment_bytes(tmp_path / "pp-1")
    storage.full = True
    results = await asyncio.gather(*(log.append(make_records(f"b{i}", 5)) for i in range(4)), return_exceptions=True)
    assert all(isinstance(r, DiskFullError) for r in results), results
    assert log.online and log.end_offset == first[1] + 1
    assert segment_bytes(tmp_path / "pp-1") == size  # the torn half is gone
    storage.full = False
    assert await log.append(make_records("c", 5)) == (5, 9)
    assert [r.key for r in read_all(log)] == [f"a-{i}".encode() for i in range(5)] + [f"c-{i}".encode() for i in range(5)]
    await log.stop()
    again = PartitionLog(tmp_path / "pp-1", settings)
    report = await again.start()
    assert report.recovered_end_offset == 10 and report.bytes_truncated == 0
    await again.stop()
