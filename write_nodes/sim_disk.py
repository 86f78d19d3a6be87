"""A simulated disk that loses, at a power loss, everything that was not fsynced.

:class:`SimDisk` implements ``write_nodes.storage.Storage`` in memory, so the real
partition log (and a whole write node) can run on it. Per file it keeps the
*durable* content (as of its last fsync) and the operations since (writes,
truncates); per directory the durable entries (as of its last fsync) and the
entry changes since (create, rename, unlink). This is the POSIX contract a
crash-safe program may rely on, and nothing more: data needs an fsync of its
file, a name needs an fsync of its directory.

``power_loss()`` ends the running "machine": every open file descriptor dies and
every later call raises ``OSError(EIO)`` until :meth:`SimDisk.power_on`. What
survives depends on ``mode``:

- ``"strict"``: only the durable state;
- ``"lazy"``: like Jepsen's LazyFS, a random prefix of each file's unsynced
  operations survives too (the last surviving write cut at a random byte: a torn
  tail), and a random prefix of each directory's unsynced entry changes.

A crash can also be *armed* (:meth:`SimDisk.arm`): a trigger sees every mutating
call before it runs (``SimOp``: kind and path) and, when it answers true, the
power fails right there (that call does not happen and raises ``EIO``), e.g.
between a group's write and its fsync, or right after a segment file is created.

``events`` records every fsync (kind ``"fsync"``, the path of the file or
directory) and every other mutating call, in order, for tests that check what was
made durable before an acknowledgement. Thread-safe (one lock): the log calls it
from its loop thread, its I/O thread and executor threads.
"""

from __future__ import annotations

import errno
import os
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

CrashMode = Literal["strict", "lazy"]
_FIRST_FD = 1 << 20  # far above real descriptors: a simulated fd given to os.* fails with EBADF


@dataclass(frozen=True, slots=True)
class SimOp:
    """One mutating call: ``kind`` in create, write, truncate, fsync, rename, unlink,
    mkdir; ``path`` the file or directory it changes (for rename: the new name)."""

    kind: str
    path: str


CrashTrigger = Callable[[SimOp], bool]


@dataclass(slots=True)
class _File:
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    pending: list[tuple[str, int, bytes]] = field(default_factory=list)  # ("w", pos, data) | ("t", size, b"")

    def sync(self) -> None:
        self.durable = bytes(self.data)
        self.pending.clear()

    def survive(self, rng: random.Random | None) -> None:
        data = bytearray(self.durable)
        if rng is not None and self.pending:
            keep = rng.randint(0, len(self.pending))
            for i, (kind, pos, chunk) in enumerate(self.pending[:keep]):
                if kind == "t":
                    _resize(data, pos)
                    continue
                if i == keep - 1:
                    chunk = chunk[: rng.randint(0, len(chunk))]
                _write_at(data, pos, chunk)
        self.data = data
        self.sync()


@dataclass(slots=True)
class _Dir:
    entries: dict[str, _File | _Dir] = field(default_factory=dict)
    durable: dict[str, _File | _Dir] = field(default_factory=dict)
    pending: list[tuple[str, _File | _Dir | None]] = field(default_factory=list)  # (name, node or None: removed)

    def set(self, name: str, node: _File | _Dir | None) -> None:
        if node is None:
            self.entries.pop(name, None)
        else:
            self.entries[name] = node
        self.pending.append((name, node))

    def sync(self) -> None:
        self.durable = dict(self.entries)
        self.pending.clear()

    def survive(self, rng: random.Random | None) -> None:
        entries = dict(self.durable)
        if rng is not None and self.pending:
            for name, node in self.pending[: rng.randint(0, len(self.pending))]:
                if node is None:
                    entries.pop(name, None)
                else:
                    entries[name] = node
        self.entries = entries
        self.sync()


@dataclass(slots=True)
class _Handle:
    node: _File | _Dir
    path: str
    append: bool
    position: int = 0


@dataclass(frozen=True, slots=True)
class PowerLossReport:
    """What one power loss did: how many files and directories had unsynced changes,
    and how many unsynced bytes of file content were not kept."""

    files_dirty: int
    dirs_dirty: int
    bytes_lost: int


def _write_at(data: bytearray, pos: int, chunk: bytes) -> None:
    if pos > len(data):
        data.extend(b"\0" * (pos - len(data)))
    data[pos : pos + len(chunk)] = chunk


def _resize(data: bytearray, size: int) -> None:
    if size <= len(data):
        del data[size:]
    else:
        data.extend(bytes(size - len(data)))


def _error(code: int, path: object = None) -> OSError:
    """``OSError`` of ``code`` (its subclass for ENOENT, EEXIST, EISDIR, as ``os`` raises)."""
    if path is None:
        return OSError(code, os.strerror(code))
    return OSError(code, os.strerror(code), str(path))


class SimDisk:
    """An in-memory disk rooted at ``root`` (a durable, existing directory: the mount
    point); paths outside it are refused. ``seed`` drives the ``lazy`` crash mode."""

    def __init__(self, root: Path, *, seed: int = 0) -> None:
        self.root = os.path.normpath(os.fspath(root))
        self._root = _Dir()
        self._rng = random.Random(seed)
        self._lock = threading.RLock()
        self._fds: dict[int, _Handle] = {}
        self._next_fd = _FIRST_FD
        self._trigger: CrashTrigger | None = None
        self._armed_mode: CrashMode = "strict"
        self.down = False
        self.ops = 0  # mutating calls made (the crashing one included)
        self.power_losses = 0
        self.events: list[SimOp] = []

    # -------------------------------------------------------------- power
    def arm(self, trigger: CrashTrigger | None, mode: CrashMode = "strict") -> None:
        """Lose power (in ``mode``) right before the first mutating call ``trigger``
        accepts; once. ``None`` disarms."""
        with self._lock:
            self._trigger = trigger
            self._armed_mode = mode

    def crash_after_ops(self, n: int, mode: CrashMode = "strict") -> None:
        """Arm a power loss before the ``n``-th mutating call from now (n >= 1)."""
        target = self.ops + n
        self.arm(lambda _op: self.ops >= target, mode)

    def power_loss(self, mode: CrashMode = "strict") -> PowerLossReport:
        """Lose power now (see the module docstring). Idempotent while down."""
        with self._lock:
            return self._power_loss(mode)

    def power_on(self) -> None:
        """The machine boots again: calls work, on what survived."""
        with self._lock:
            self.down = False

    def _power_loss(self, mode: CrashMode) -> PowerLossReport:
        if self.down:
            return PowerLossReport(0, 0, 0)
        self.down = True
        self._trigger = None
        self.power_losses += 1
        self._fds.clear()
        rng = self._rng if mode == "lazy" else None
        files = dirs = lost = 0
        for node in self._all_nodes():
            if isinstance(node, _Dir):
                dirs += bool(node.pending)
                node.survive(rng)
            else:
                if node.pending:
                    files += 1
                    before = len(node.data)
                    node.survive(rng)
                    lost += max(0, before - len(node.data))
                else:
                    node.survive(None)
        return PowerLossReport(files, dirs, lost)

    def _all_nodes(self) -> list[_File | _Dir]:
        """Every node reachable now or durably (a crash may bring an old name back)."""
        seen: dict[int, _File | _Dir] = {}
        stack: list[_File | _Dir] = [self._root]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen[id(node)] = node
            if isinstance(node, _Dir):
                stack.extend(node.entries.values())
                stack.extend(node.durable.values())
                stack.extend(n for _, n in node.pending if n is not None)
        return list(seen.values())

    # ------------------------------------------------------------ internals
    def _mutate(self, kind: str, path: object) -> None:
        """Called (under the lock) before each mutating call: refuse while down, count
        it, fire an armed trigger."""
        self._up(path)
        self.ops += 1
        op = SimOp(kind, str(path))
        if self._trigger is not None and self._trigger(op):
            self._power_loss(self._armed_mode)
            raise _error(errno.EIO, path)
        self.events.append(op)

    def _up(self, path: object) -> None:
        if self.down:
            raise _error(errno.EIO, path)

    def _parts(self, path: object) -> list[str]:
        p = os.path.normpath(os.fspath(path))  # type: ignore[arg-type]
        if p == self.root:
            return []
        prefix = self.root.rstrip("/") + "/"
        if not p.startswith(prefix):
            raise _error(errno.EXDEV, path)
        return p[len(prefix) :].split("/")

    def _lookup(self, path: object) -> _File | _Dir:
        node: _File | _Dir = self._root
        for part in self._parts(path):
            if not isinstance(node, _Dir):
                raise _error(errno.ENOTDIR, path)
            child = node.entries.get(part)
            if child is None:
                raise _error(errno.ENOENT, path)
            node = child
        return node

    def _parent(self, path: object) -> tuple[_Dir, str]:
        parts = self._parts(path)
        if not parts:
            raise _error(errno.EBUSY, path)
        parent = self._lookup(os.path.join(self.root, *parts[:-1]))
        if not isinstance(parent, _Dir):
            raise _error(errno.ENOTDIR, path)
        return parent, parts[-1]

    def _handle(self, fd: int) -> _Handle:
        if self.down:
            raise _error(errno.EIO)
        handle = self._fds.get(fd)
        if handle is None:
            raise _error(errno.EBADF)
        return handle

    def _file(self, fd: int) -> tuple[_Handle, _File]:
        handle = self._handle(fd)
        if not isinstance(handle.node, _File):
            raise _error(errno.EISDIR, handle.path)
        return handle, handle.node

    def _new_fd(self, node: _File | _Dir, path: object, append: bool) -> int:
        fd = self._next_fd
        self._next_fd += 1
        self._fds[fd] = _Handle(node, str(path), append)
        return fd

    # -------------------------------------------------------------- Storage
    def open(self, path: Path, flags: int, mode: int = 0o644) -> int:
        with self._lock:
            self._up(path)
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                if not flags & os.O_CREAT:
                    raise _error(errno.ENOENT, path)
                self._mutate("create", path)
                node = _File()
                parent.set(name, node)
            elif flags & os.O_CREAT and flags & os.O_EXCL:
                raise _error(errno.EEXIST, path)
            if isinstance(node, _Dir):
                raise _error(errno.EISDIR, path)
            if flags & os.O_TRUNC and node.data:
                self._mutate("truncate", path)
                del node.data[:]
                node.pending.append(("t", 0, b""))
            return self._new_fd(node, path, bool(flags & os.O_APPEND))

    def open_dir(self, path: Path) -> int:
        with self._lock:
            self._up(path)
            node = self._lookup(path)
            if not isinstance(node, _Dir):
                raise _error(errno.ENOTDIR, path)
            return self._new_fd(node, path, False)

    def close(self, fd: int) -> None:
        with self._lock:
            self._handle(fd)
            del self._fds[fd]

    def write_all(self, fd: int, buffers: Sequence[bytes]) -> int:
        with self._lock:
            handle, node = self._file(fd)
            chunk = b"".join(buffers)
            self._mutate("write", handle.path)
            pos = len(node.data) if handle.append else handle.position
            _write_at(node.data, pos, chunk)
            node.pending.append(("w", pos, chunk))
            handle.position = pos + len(chunk)
            return len(chunk)

    def write_all_dsync(self, fd: int, buffers: Sequence[bytes]) -> int:
        """``write_all`` then ``fdatasync``: a crash point between the two, like the OS call
        that may be cut by a power loss after some of the data reached the disk."""
        n = self.write_all(fd, buffers)
        self.fdatasync(fd)
        return n

    def pread(self, fd: int, n: int, position: int) -> bytes:
        with self._lock:
            _, node = self._file(fd)
            return bytes(node.data[position : position + n])

    def size(self, fd: int) -> int:
        with self._lock:
            _, node = self._file(fd)
            return len(node.data)

    def truncate(self, fd: int, size: int) -> None:
        with self._lock:
            handle, node = self._file(fd)
            self._mutate("truncate", handle.path)
            _resize(node.data, size)
            node.pending.append(("t", size, b""))

    def fsync(self, fd: int) -> None:
        with self._lock:
            handle = self._handle(fd)
            self._mutate("fsync", handle.path)
            handle.node.sync()

    fdatasync = fsync

    def replace(self, src: Path, dst: Path) -> None:
        with self._lock:
            self._up(src)
            src_dir, src_name = self._parent(src)
            node = src_dir.entries.get(src_name)
            if node is None:
                raise _error(errno.ENOENT, src)
            dst_dir, dst_name = self._parent(dst)
            self._mutate("rename", dst)
            src_dir.set(src_name, None)
            dst_dir.set(dst_name, node)

    def unlink(self, path: Path) -> None:
        with self._lock:
            self._up(path)
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise _error(errno.ENOENT, path)
            if isinstance(node, _Dir):
                raise _error(errno.EISDIR, path)
            self._mutate("unlink", path)
            parent.set(name, None)

    def listdir(self, path: Path) -> list[str]:
        with self._lock:
            self._up(path)
            node = self._lookup(path)
            if not isinstance(node, _Dir):
                raise _error(errno.ENOTDIR, path)
            return list(node.entries)

    def makedirs(self, path: Path) -> None:
        """Create the missing directories, each made durable in its parent (as the
        real storage does: mkdir, then fsync of the parent)."""
        with self._lock:
            self._up(path)
            node: _File | _Dir = self._root
            current = self.root
            for part in self._parts(path):
                if not isinstance(node, _Dir):
                    raise _error(errno.ENOTDIR, path)
                child = node.entries.get(part)
                if child is None:
                    self._mutate("mkdir", os.path.join(current, part))
                    child = _Dir()
                    node.set(part, child)
                    self._mutate("fsync", current)
                    node.sync()
                node = child
                current = os.path.join(current, part)

    def read_file(self, path: Path) -> bytes:
        with self._lock:
            self._up(path)
            node = self._lookup(path)
            if isinstance(node, _Dir):
                raise _error(errno.EISDIR, path)
            return bytes(node.data)

    def file_size(self, path: Path) -> int:
        with self._lock:
            self._up(path)
            node = self._lookup(path)
            return len(node.data) if isinstance(node, _File) else 0
