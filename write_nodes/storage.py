"""The file-system calls of the partition log, behind one small injectable interface.

Every byte the log puts on disk, and every name it creates, renames or removes, goes
through a :class:`Storage`: the segment files, the index files, the recovery-point
checkpoint, recovery's repairs and the directory fsyncs. :data:`OS_STORAGE` is the
real file system; a test injects another implementation (``write_nodes.sim_disk``,
a disk that loses what was not fsynced when it "loses power").

Contract (the real implementation is a thin layer over ``os``; any other must keep
the same meaning):
- file descriptors are ``int``; ``open`` takes ``os.O_*`` flags (``O_APPEND`` writes go
  to the end of the file); ``open_dir`` opens a directory only so it can be fsynced;
- ``write_all`` writes every buffer, in order (retrying short writes), at the file
  position (the end for ``O_APPEND``);
- ``write_all_dsync`` is ``write_all`` then ``fdatasync`` of the file, made as one call
  where the OS allows (``pwritev2`` with ``RWF_DSYNC``): when it returns, the buffers
  are durable as after an ``fdatasync``;
- data written is *durable* only after ``fsync``/``fdatasync`` of its file; a name
  created, renamed or removed in a directory is durable only after an fsync of that
  directory (POSIX; what a power loss is allowed to take back);
- ``makedirs`` creates a directory and its missing parents, each made durable in
  its parent (the parent is fsynced);
- every call may raise ``OSError``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

_IOV_MAX = min(os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024, 1024)


def _dsync_writev() -> Callable[[int, list[bytes | memoryview]], int] | None:
    """``writev`` at the file position with ``RWF_DSYNC`` (``pwritev2``), None where the
    OS or Python lacks it."""
    pwritev, flag = getattr(os, "pwritev", None), getattr(os, "RWF_DSYNC", None)
    if pwritev is None or flag is None:
        return None

    def writev(fd: int, buffers: list[bytes | memoryview]) -> int:
        return pwritev(fd, buffers, -1, flag)

    return writev


class _DsyncSupport:
    def __init__(self) -> None:
        self.writev = _dsync_writev()
        self.proven = False  # a call succeeded: an EINVAL from now on is a real error


_DSYNC = _DsyncSupport()


class Storage(Protocol):
    """The file-system calls of a partition log (see the module docstring)."""

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int: ...

    def open_dir(self, path: Path) -> int: ...

    def close(self, fd: int) -> None: ...

    def write_all(self, fd: int, buffers: Sequence[bytes]) -> int: ...

    def write_all_dsync(self, fd: int, buffers: Sequence[bytes]) -> int: ...

    def pread(self, fd: int, n: int, position: int) -> bytes: ...

    def size(self, fd: int) -> int: ...

    def truncate(self, fd: int, size: int) -> None: ...

    def fsync(self, fd: int) -> None: ...

    def fdatasync(self, fd: int) -> None: ...

    def replace(self, src: Path, dst: Path) -> None: ...

    def unlink(self, path: Path) -> None: ...

    def listdir(self, path: Path) -> list[str]: ...

    def makedirs(self, path: Path) -> None: ...

    def read_file(self, path: Path) -> bytes: ...

    def file_size(self, path: Path) -> int: ...


def writev_all(writev: Callable[[int, list[bytes | memoryview]], int], fd: int, buffers: Sequence[bytes]) -> int:
    """Write every buffer with ``writev(fd, chunk) -> n``, in order, with as few calls as
    possible (one unless there are more than IOV_MAX buffers or a write is short)."""
    total = 0
    pending: list[bytes | memoryview] = list(buffers)
    while pending:
        chunk = pending[:_IOV_MAX]
        wanted = sum(len(b) for b in chunk)
        n = writev(fd, chunk)
        total += n
        if n == wanted:
            pending = pending[_IOV_MAX:]
            continue
        # short write: drop what was written, keep the rest
        rest: list[bytes | memoryview] = []
        skip = n
        for buf in pending:
            if skip >= len(buf):
                skip -= len(buf)
                continue
            rest.append(memoryview(buf)[skip:] if skip else buf)
            skip = 0
        pending = rest
    return total


class OsStorage:
    """The real file system (``os`` calls)."""

    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def open_dir(self, path: Path) -> int:
        return os.open(path, os.O_RDONLY)

    def close(self, fd: int) -> None:
        os.close(fd)

    def write_all(self, fd: int, buffers: Sequence[bytes]) -> int:
        return writev_all(os.writev, fd, buffers)

    def write_all_dsync(self, fd: int, buffers: Sequence[bytes]) -> int:
        """``write_all`` + ``fdatasync`` in one ``pwritev2(RWF_DSYNC)`` per chunk at the file
        position (``-1``), where the OS has it; else, and in a subclass that overrides
        ``write_all`` or ``fdatasync``, the two calls."""
        cls = type(self)
        writev = _DSYNC.writev
        if writev is not None and cls.write_all is OsStorage.write_all and cls.fdatasync is OsStorage.fdatasync:
            try:
                n = writev_all(writev, fd, buffers)
            except OSError as exc:
                # a kernel older than RWF_DSYNC refuses the flag before writing anything
                if _DSYNC.proven or exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                    raise
                _DSYNC.writev = None
            else:
                _DSYNC.proven = True
                return n
        n = self.write_all(fd, buffers)
        self.fdatasync(fd)
        return n

    def pread(self, fd: int, n: int, position: int) -> bytes:
        return os.pread(fd, n, position)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fdatasync(self, fd: int) -> None:
        """``fdatasync`` where it exists (it still flushes the file size), else ``fsync``."""
        (getattr(os, "fdatasync", None) or os.fsync)(fd)

    def replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def listdir(self, path: Path) -> list[str]:
        return os.listdir(path)

    def makedirs(self, path: Path) -> None:
        path = Path(path)
        if path.is_dir():
            return
        missing = [path]
        while not missing[-1].parent.exists() and missing[-1].parent != missing[-1]:
            missing.append(missing[-1].parent)
        for directory in reversed(missing):
            try:
                os.mkdir(directory)
            except FileExistsError:
                continue
            fsync_directory(self, directory.parent)

    def read_file(self, path: Path) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def file_size(self, path: Path) -> int:
        return os.stat(path).st_size


OS_STORAGE: Storage = OsStorage()


def fsync_directory(storage: Storage, directory: Path) -> None:
    """Make the names created, renamed or removed in ``directory`` durable."""
    fd = storage.open_dir(directory)
    try:
        storage.fsync(fd)
    finally:
        storage.close(fd)
