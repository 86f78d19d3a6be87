"""The simulated disk keeps exactly what was made durable: file data after an fsync
of the file, names after an fsync of their directory."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from vpq.write_nodes.sim_disk import SimDisk
from vpq.write_nodes.storage import fsync_directory

ROOT = Path("/sim")
NEW = os.O_RDWR | os.O_CREAT | os.O_APPEND


def _disk() -> SimDisk:
    disk = SimDisk(ROOT, seed=7)
    disk.makedirs(ROOT / "d")
    return disk


def _reboot(disk: SimDisk, mode: str = "strict") -> None:
    disk.power_loss(mode)  # type: ignore[arg-type]
    disk.power_on()


def test_unsynced_data_is_lost_synced_data_kept() -> None:
    disk = _disk()
    fd = disk.open(ROOT / "d" / "f", NEW)
    fsync_directory(disk, ROOT / "d")
    disk.write_all(fd, [b"durable "])
    disk.fsync(fd)
    disk.write_all(fd, [b"lost"])
    assert disk.read_file(ROOT / "d" / "f") == b"durable lost"
    _reboot(disk)
    assert disk.read_file(ROOT / "d" / "f") == b"durable "


def test_a_new_name_needs_a_directory_fsync() -> None:
    disk = _disk()
    fd = disk.open(ROOT / "d" / "f", NEW)
    disk.write_all(fd, [b"data"])
    disk.fsync(fd)  # the data is durable, its name is not
    _reboot(disk)
    assert disk.listdir(ROOT / "d") == []
    fd = disk.open(ROOT / "d" / "g", NEW)
    fsync_directory(disk, ROOT / "d")  # the name is durable, its data is not
    disk.write_all(fd, [b"data"])
    _reboot(disk)
    assert disk.listdir(ROOT / "d") == ["g"] and disk.read_file(ROOT / "d" / "g") == b""


def test_rename_and_unlink_are_undone_without_a_directory_fsync() -> None:
    disk = _disk()
    for name, data in (("old", b"1"), ("tmp", b"2")):
        fd = disk.open(ROOT / "d" / name, NEW)
        disk.write_all(fd, [data])
        disk.fsync(fd)
        disk.close(fd)
    fsync_directory(disk, ROOT / "d")
    disk.replace(ROOT / "d" / "tmp", ROOT / "d" / "old")
    assert disk.read_file(ROOT / "d" / "old") == b"2"
    _reboot(disk)
    assert sorted(disk.listdir(ROOT / "d")) == ["old", "tmp"] and disk.read_file(ROOT / "d" / "old") == b"1"
    disk.unlink(ROOT / "d" / "tmp")
    _reboot(disk)
    assert "tmp" in disk.listdir(ROOT / "d")


def test_lazy_power_loss_keeps_a_prefix_of_the_unsynced_writes() -> None:
    disk = _disk()
    fd = disk.open(ROOT / "d" / "f", NEW)
    fsync_directory(disk, ROOT / "d")
    disk.write_all(fd, [b"base|"])
    disk.fsync(fd)
    written = b"base|" + b"".join(f"w{i:02d}|".encode() for i in range(20))
    for i in range(20):
        disk.write_all(fd, [f"w{i:02d}|".encode()])
    seen = set()
    for _ in range(20):
        snapshot = disk.read_file(ROOT / "d" / "f")
        _reboot(disk, "lazy")
        kept = disk.read_file(ROOT / "d" / "f")
        assert kept.startswith(b"base|") and snapshot.startswith(kept)
        seen.add(len(kept))
        disk.write_all(disk.open(ROOT / "d" / "f", os.O_RDWR | os.O_APPEND), [written[len(kept) :]])
    assert len(seen) > 1  # not always all, not always nothing


def test_a_power_loss_ends_every_call_until_power_on() -> None:
    disk = _disk()
    fd = disk.open(ROOT / "d" / "f", NEW)
    disk.power_loss()
    for call in (lambda: disk.write_all(fd, [b"x"]), lambda: disk.listdir(ROOT), lambda: disk.open(ROOT / "d" / "g", NEW)):
        with pytest.raises(OSError) as ei:
            call()
        assert ei.value.errno == errno.EIO
    disk.power_on()
    with pytest.raises(OSError) as ei:
        disk.write_all(fd, [b"x"])  # descriptors do not survive a reboot
    assert ei.value.errno == errno.EBADF


def test_an_armed_crash_fires_before_the_call_it_accepts() -> None:
    disk = _disk()
    fd = disk.open(ROOT / "d" / "f", NEW)
    fsync_directory(disk, ROOT / "d")
    disk.write_all(fd, [b"kept"])
    disk.arm(lambda op: op.kind == "fsync")
    with pytest.raises(OSError):
        disk.fsync(fd)
    assert disk.down
    disk.power_on()
    assert disk.read_file(ROOT / "d" / "f") == b""
    assert [op.kind for op in disk.events][-2:] == ["fsync", "write"]


def test_paths_outside_the_root_are_refused() -> None:
    with pytest.raises(OSError):
        _disk().open(Path("/elsewhere/f"), NEW)


def test_makedirs_makes_every_new_directory_durable() -> None:
    disk = SimDisk(ROOT)
    disk.makedirs(ROOT / "a" / "b" / "c")
    _reboot(disk)
    assert disk.listdir(ROOT / "a" / "b") == ["c"]


def test_a_truncate_that_grows_the_file_survives_as_zeros_once_synced() -> None:
    disk = _disk()
    fd = disk.open(ROOT / "d" / "f", NEW)
    fsync_directory(disk, ROOT / "d")
    disk.write_all(fd, [b"ab"])
    disk.truncate(fd, 5)
    disk.fsync(fd)
    _reboot(disk)
    assert disk.read_file(ROOT / "d" / "f") == b"ab\0\0\0"
