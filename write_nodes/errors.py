"""Errors raised by the physical-partition log.

Contract:
- every ``OSError`` met while touching a partition's files is wrapped in
  :class:`LogIOError` (the original is chained as ``__cause__``) and takes the
  partition offline; it is never swallowed;
- except a write refused because the disk is full (:class:`DiskFullError`): the
  log undid it (and every append queued behind it) and stays online;
- an offline partition raises :class:`PartitionOfflineError` (a ``LogIOError``)
  on every further append or read, until it is stopped and reopened (recovery);
- :class:`OffsetOutOfRangeError` reports a read below the log start offset
  (the data was deleted by retention) or beyond the end of the log.
"""

from __future__ import annotations


class LogIOError(OSError):
    """An I/O error on a partition's files. The partition is offline afterwards."""

    def __init__(self, message: str, partition_id: int | None = None) -> None:
        super().__init__(message)
        self.partition_id = partition_id


class DiskFullError(LogIOError):
    """An append was not made because the disk is full (ENOSPC/EDQUOT). Nothing of it
    is in the log; the partition stays online and takes appends again once there is
    space."""


class PartitionOfflineError(LogIOError):
    """The partition went offline after an I/O error (or is not started / already stopped)."""


class OffsetOutOfRangeError(ValueError):
    """A read asked for an offset outside ``[start_offset, end_offset]``."""

    def __init__(self, offset: int, start_offset: int, end_offset: int) -> None:
        super().__init__(f"offset {offset} outside [{start_offset}, {end_offset}]")
        self.offset = offset
        self.start_offset = start_offset
        self.end_offset = end_offset
