"""The write node's disk headroom rule (pure: the file system's numbers are given)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from vpq.common.errors import InsufficientStorage, VpqError
from vpq.write_nodes.disk_guard import DiskGuard, GiB, default_min_free, is_disk_full
from vpq.write_nodes.errors import PartitionOfflineError


def fs(free: int, total: int, frsize: int = 4096) -> os.statvfs_result:
    return os.statvfs_result((frsize, frsize, total // frsize, free // frsize, free // frsize, 0, 0, 0, 0, 255))


def test_default_headroom_is_1_gib_or_5_percent_whichever_is_smaller() -> None:
    assert default_min_free(64 << 20) == (64 << 20) * 5 // 100
    assert default_min_free(100 * GiB) == GiB


def test_check_refuses_what_would_eat_into_the_headroom() -> None:
    total = 64 << 20
    guard = DiskGuard(Path("/x"), statvfs=lambda _p: fs(8 << 20, total))
    guard.check(1 << 20)  # 7 MiB left > 3.2 MiB
    with pytest.raises(InsufficientStorage) as caught:
        guard.check(5 << 20)
    err = caught.value
    assert err.status == 507 and err.code == "insufficient_storage"
    assert err.headers()["Retry-After"] == "1"
    assert err.details["min_free_bytes"] == total * 5 // 100
    assert guard.refused == 1
    again = VpqError.from_dict(err.to_dict(), 507)  # as the gateway rebuilds a node's answer
    assert isinstance(again, InsufficientStorage) and again.retry_after == 1.0
    assert DiskGuard(Path("/x"), 0, statvfs=lambda _p: fs(8 << 20, total)).check(8 << 20) is None


def test_an_unreadable_file_system_refuses_nothing() -> None:
    def broken(_p: Path) -> os.statvfs_result:
        raise OSError(errno.EIO, "gone")

    DiskGuard(Path("/x"), statvfs=broken).check(1 << 30)


def test_enospc_anywhere_in_the_cause_chain_is_a_full_disk() -> None:
    cause = OSError(errno.ENOSPC, "No space left on device")
    wrapped = PartitionOfflineError("partition 0: I/O error, partition offline")
    wrapped.__cause__ = cause
    assert is_disk_full(wrapped)
    assert not is_disk_full(PartitionOfflineError("x"))
    guard = DiskGuard(Path("/x"), statvfs=lambda _p: fs(0, 1 << 20))
    err = guard.storage_error(wrapped)
    assert isinstance(err, InsufficientStorage) and err.status == 507
    assert guard.storage_error(OSError(errno.EIO, "io")) is None
