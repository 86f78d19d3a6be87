"""The recovery-point checkpoint of a partition directory.

The file ``recovery-point.checkpoint`` holds one offset R: every segment whose
successor starts at or below R was fsynced together with its index files, so
recovery may trust it without scanning. Format (text, two lines)::

    vpq-recovery-point 1
    <R>

It is replaced atomically: write a temporary file, fsync it, rename it over the
old one, fsync the directory. A missing or unreadable file means "trust nothing"
(recovery scans every segment), which is always safe.
"""

from __future__ import annotations

import os
from pathlib import Path

from vpq.write_nodes import filenames
from vpq.write_nodes.storage import OS_STORAGE, Storage, fsync_directory

_MAGIC = "vpq-recovery-point 1"


def encode_checkpoint(recovery_point: int) -> bytes:
    if recovery_point < 0:
        raise ValueError(f"negative recovery point {recovery_point}")
    return f"{_MAGIC}\n{recovery_point}\n".encode("ascii")


def decode_checkpoint(data: bytes) -> int | None:
    """The recovery point in ``data``, or ``None`` if it is not a well-formed checkpoint."""
    try:
        lines = data.decode("ascii").split("\n")
    except UnicodeDecodeError:
        return None
    if len(lines) != 3 or lines[0] != _MAGIC or lines[2] != "" or not lines[1].isdigit():
        return None
    return int(lines[1])


def read_checkpoint(directory: Path, storage: Storage = OS_STORAGE) -> int | None:
    """The stored recovery point, ``None`` when the file is missing or malformed."""
    try:
        data = storage.read_file(filenames.checkpoint_file(directory))
    except FileNotFoundError:
        return None
    return decode_checkpoint(data)


def write_checkpoint(directory: Path, recovery_point: int, storage: Storage = OS_STORAGE) -> None:
    """Atomically replace the checkpoint (tmp file, fsync, rename, fsync directory)."""
    path = filenames.checkpoint_file(directory)
    tmp = filenames.tmp_file(path)
    fd = storage.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        storage.write_all(fd, [encode_checkpoint(recovery_point)])
        storage.fsync(fd)
    finally:
        storage.close(fd)
    storage.replace(tmp, path)
    fsync_directory(storage, directory)
