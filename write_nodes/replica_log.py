"""Per-replica durable state of a replicated partition: the leader-epoch history and truncation.

``EpochHistory`` (file ``leader-epoch.history`` in the partition directory) is the list of
(leader epoch, start offset) pairs of the log, epochs strictly increasing, start offsets
non-decreasing: the records from ``start`` up to the next entry's start were written by
the leader of ``epoch``. A new leader appends (its epoch, its log end) before it takes
any append; a follower copies the leader's entries that cover what it has copied. The
file is replaced atomically (tmp, fsync, rename, directory fsync), like the checkpoint.

``end_offset_for(epoch, log_end)`` is Kafka's OffsetsForLeaderEpoch: the largest epoch
``e <= epoch`` of the history and the end of its records (the next entry's start, or
``log_end`` for the last epoch). A follower whose log goes past that end for its last
epoch has diverged and truncates there (never to a high watermark: KIP-101).

``truncate_log_dir`` cuts a (closed) partition directory at a batch boundary at or below
an offset (an end marker of the last segment kept is lowered to the cut, so the log
does not end past it); the next ``PartitionLog.start()`` recovers what is left by a full
scan.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import BatchView
from vpq.write_nodes import filenames
from vpq.write_nodes.end_marker import read_end_marker, write_end_marker
from vpq.write_nodes.segment import LogSegment
from vpq.write_nodes.storage import OS_STORAGE, Storage, fsync_directory

HISTORY_FILE = "leader-epoch.history"
_MAGIC = "vpq-leader-epochs 1"


def encode_history(entries: Iterable[tuple[int, int]]) -> bytes:
    lines = [_MAGIC] + [f"{e} {s}" for e, s in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def decode_history(data: bytes) -> list[tuple[int, int]] | None:
    """The entries in ``data``, ``None`` when it is not a well-formed history."""
    try:
        lines = data.decode("ascii").split("\n")
    except UnicodeDecodeError:
        return None
    if not lines or lines[0] != _MAGIC or lines[-1] != "":
        return None
    out: list[tuple[int, int]] = []
    for line in lines[1:-1]:
        parts = line.split(" ")
        if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
            return None
        out.append((int(parts[0]), int(parts[1])))
    return out


class EpochHistory:
    """The (epoch, start offset) history of one replica (see module doc)."""

    def __init__(self, directory: Path, entries: list[tuple[int, int]], storage: Storage = OS_STORAGE) -> None:
        self.directory = directory
        self.entries = entries
        self._storage = storage

    @classmethod
    def load(cls, directory: Path, log_end: int, storage: Storage = OS_STORAGE) -> EpochHistory:
        """The stored history without entries starting past ``log_end`` (written before a
        crash took the data back). A missing or damaged file is an empty history: the
        follower then truncates as far as the leader's answer for "no epoch" says."""
        try:
            entries = decode_history(storage.read_file(directory / HISTORY_FILE)) or []
        except FileNotFoundError:
            entries = []
        return cls(directory, [(e, s) for e, s in entries if s <= log_end], storage)

    @property
    def last_epoch(self) -> int:
        """The epoch of the newest entry, -1 when there is none."""
        return self.entries[-1][0] if self.entries else -1

    def end_offset_for(self, epoch: int, log_end: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch``, end offset of its records); (-1, 0) when none."""
        found = -1
        for i, (e, _s) in enumerate(self.entries):
            if e > epoch:
                break
            found = i
        if found < 0:
            return -1, 0
        nxt = self.entries[found + 1][1] if found + 1 < len(self.entries) else log_end
        return self.entries[found][0], nxt

    def changed_by_assign(self, epoch: int, start: int) -> bool:
        if self.entries and self.entries[-1][0] >= epoch:
            return False
        self.entries.append((epoch, start))
        return True

    def adopt(self, leader_entries: Iterable[tuple[int, int]], end: int) -> bool:
        """Take the leader's entries that start at or below ``end`` (this replica's log
        is a prefix of the leader's up to ``end``) after the last one it has; True when
        something changed (then ``save``)."""
        changed = False
        for e, s in leader_entries:
            if s <= end:
                changed = self.changed_by_assign(e, s) or changed
        return changed

    def truncate(self, end: int) -> None:
        """Forget entries whose records all lie at or past ``end``."""
        self.entries = [(e, s) for e, s in self.entries if s < end]

    def save(self) -> None:
        """Replace the file atomically (blocking I/O: call from an executor)."""
        storage = self._storage
        path = self.directory / HISTORY_FILE
        tmp = filenames.tmp_file(path)
        fd = storage.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            storage.write_all(fd, [encode_history(self.entries)])
            storage.fsync(fd)
        finally:
            storage.close(fd)
        storage.replace(tmp, path)
        fsync_directory(storage, self.directory)


def truncate_log_dir(directory: Path, offset: int, index_interval_bytes: int, now_ms: int, storage: Storage = OS_STORAGE) -> None:
    """Cut the closed partition directory so no batch ending at or past ``offset``
    remains (a batch holding ``offset`` goes whole); drops the recovery checkpoint so
    the next start scans (blocking I/O: call from an executor)."""
    bases = filenames.list_segment_bases(directory, storage)
    keep = [b for b in bases if b < offset]
    for b in bases:
        if b >= offset:
            for path in (
                filenames.log_file(directory, b),
                filenames.index_file(directory, b),
                filenames.time_index_file(directory, b),
                filenames.compacted_file(directory, b),
            ):
                _unlink(storage, path)
    _unlink(storage, filenames.checkpoint_file(directory))
    if not keep:
        LogSegment.create(directory, offset, index_interval_bytes, now_ms, storage).close()
    else:
        seg = LogSegment.open(directory, keep[-1], index_interval_bytes, now_ms, storage)
        try:
            size = seg.file_size()
            cut, kept_end = size, keep[-1]
            try:
                for pos, fields in seg.iter_headers(0, size):
                    if fields[0] + fields[5] >= offset:
                        cut = pos
                        break
                    kept_end = fields[0] + fields[5] + 1
            except CorruptBatchError:
                pass  # recovery cuts the damaged tail itself
            if cut < size:
                seg.truncate(cut)
                storage.fsync(seg.fd)
            marker = read_end_marker(storage, directory, keep[-1])
            if marker is not None and marker > offset:  # a gap past the cut: the log ends at the cut
                write_end_marker(storage, directory, keep[-1], kept_end)
        finally:
            seg.close()
        _unlink(storage, filenames.index_file(directory, keep[-1]))
        _unlink(storage, filenames.time_index_file(directory, keep[-1]))
    fsync_directory(storage, directory)


def _unlink(storage: Storage, path: Path) -> None:
    try:
        storage.unlink(path)
    except FileNotFoundError:
        pass


def trim_batches(data: bytes, end: int) -> bytes:
    """The leading whole batches of ``data`` whose records all lie below ``end``."""
    pos = 0
    n = len(data)
    while pos < n:
        try:
            view = BatchView(data, pos)
        except CorruptBatchError:
            break
        if view.next_offset > end:
            break
        pos += view.size
    return data if pos == n else data[:pos]
