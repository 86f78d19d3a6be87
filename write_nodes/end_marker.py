"""The end marker of a compacted segment: ``<base>.compacted``.

A compacted segment keeps the offsets of the batches that survived, so its
offsets may have gaps and its last batch may end before the next segment's base.
The marker holds the offset the segment ended at before compaction (its
``next_offset``), so recovery still sees the segments continue each other, and
tells recovery that gaps inside this segment are expected.

On disk: 8 bytes big-endian end offset, then 4 bytes big-endian CRC32C of them.
A marker that is missing, short or fails its CRC reads as ``None`` (no marker);
:func:`write_end_marker` writes it crash-safely (temporary file, fsync, rename).
The rename is made durable by the caller's next directory fsync.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from crc32c import crc32c

from vpq.write_nodes import filenames
from vpq.write_nodes.storage import Storage

_FORMAT = struct.Struct(">qI")


def encode(end_offset: int) -> bytes:
    head = end_offset.to_bytes(8, "big", signed=True)
    return _FORMAT.pack(end_offset, crc32c(head))


def decode(data: bytes) -> int | None:
    if len(data) != _FORMAT.size:
        return None
    end, crc = _FORMAT.unpack(data)
    if crc32c(data[:8]) != crc or end < 0:
        return None
    return int(end)


def read_end_marker(storage: Storage, directory: Path, base_offset: int) -> int | None:
    """The end offset recorded for segment ``base_offset``, ``None`` without a valid marker."""
    try:
        return decode(storage.read_file(filenames.compacted_file(directory, base_offset)))
    except FileNotFoundError:
        return None


def write_end_marker(storage: Storage, directory: Path, base_offset: int, end_offset: int) -> None:
    """Write the marker through a fsynced temporary file renamed into place."""
    path = filenames.compacted_file(directory, base_offset)
    tmp = filenames.tmp_file(path)
    fd = storage.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        storage.write_all(fd, [encode(end_offset)])
        storage.fsync(fd)
    finally:
        storage.close(fd)
    storage.replace(tmp, path)
