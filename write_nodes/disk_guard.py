"""A write node's disk headroom: produce is refused before the disk is full.

``DiskGuard(path, min_free_bytes)`` watches the file system of the node's data
directory. ``check(incoming)`` raises ``InsufficientStorage`` (507
``insufficient_storage``, ``Retry-After``) when appending ``incoming`` more bytes
would leave less than the headroom free; the append handler calls it before it
admits anything, so a refused request appends nothing. The headroom is
``min_free_bytes``, or with ``-1`` (the default) 1 GiB or 5 % of the file
system, whichever is smaller: it keeps room for what shares the disk and must
keep working when produce stops (segment indexes and checkpoints, the embedded
Redis's AOF under ``vpq up``'s default data directory). Space is looked up on
every check (one ``statvfs``, about a microsecond), so produce resumes by itself
as soon as space returns; a ``statvfs`` that fails refuses nothing.

``storage_error(exc)`` tells whether a log failure was the disk running full
anyway (``ENOSPC``/``EDQUOT`` somewhere in the exception's cause chain): the
append answers 507 too, and the partition's log is reopened (recovery truncates
the partial batch) without the growing backoff of other I/O errors.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path

from vpq.common.errors import InsufficientStorage

log = logging.getLogger(__name__)

GiB = 1 << 30
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def default_min_free(total_bytes: int) -> int:
    """1 GiB or 5 % of the file system, whichever is smaller."""
    return min(GiB, total_bytes * 5 // 100)


def is_disk_full(exc: BaseException | None) -> bool:
    """True when ``exc`` or an exception it was caused by is ENOSPC/EDQUOT."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, OSError) and exc.errno in FULL_ERRNOS:
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class DiskGuard:
    def __init__(
        self,
        path: Path,
        min_free_bytes: int = -1,
        *,
        retry_after_s: float = 1.0,
        statvfs: Callable[[Path], os.statvfs_result] = os.statvfs,
    ) -> None:
        self.path = path
        self._min_free = min_free_bytes
        self._retry_after_s = retry_after_s
        self._statvfs = statvfs
        self.refused = 0
        self._failing = False

    def usage(self) -> tuple[int, int] | None:
        """``(free bytes available to the node, total bytes)``, None when unknown."""
        try:
            st = self._statvfs(self.path)
        except OSError as exc:
            if not self._failing:
                log.warning("cannot read the free space of %s: %s", self.path, exc)
                self._failing = True
            return None
        self._failing = False
        return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize

    def min_free(self, total_bytes: int) -> int:
        return self._min_free if self._min_free >= 0 else default_min_free(total_bytes)

    def check(self, incoming: int) -> None:
        """``InsufficientStorage`` when ``incoming`` more bytes would eat into the headroom."""
        usage = self.usage()
        if usage is None:
            return
        free, total = usage
        keep = self.min_free(total)
        if free - incoming < keep:
            self.refused += 1
            raise InsufficientStorage(
                message=f"the write node is short of disk: {free} bytes free, it keeps {keep} free; "
                "nothing was appended",
                retry_after=self._retry_after_s,
                free_bytes=free,
                min_free_bytes=keep,
            )

    def storage_error(self, exc: BaseException) -> InsufficientStorage | None:
        """The 507 to answer when ``exc`` (a log failure) was the disk running full."""
        if not is_disk_full(exc):
            return None
        self.refused += 1
        return InsufficientStorage(
            message=f"the write node's disk is full: nothing was appended ({exc})", retry_after=self._retry_after_s
        )
