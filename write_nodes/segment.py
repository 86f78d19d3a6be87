"""One log segment: a data file of record batches plus its sparse indexes.

Contract:
- the data file ``<base>.log`` only grows at its end (``O_APPEND``), except when
  recovery truncates a torn tail or compaction (``write_nodes.compaction``) replaces
  a sealed segment by one holding a subset of its batches at their original offsets;
- the batches of a segment follow each other (each starts where the previous ended),
  except in a compacted segment (``end_marker`` set: the offset it ended at before
  compaction, see ``write_nodes.end_marker``), where later batches may start
  further on (gaps) and ``next_offset`` is at least ``end_marker``;
- bookkeeping and I/O are split: :meth:`LogSegment.track_append` records a batch
  that *will* be written (position, indexes, timestamps) and is called on the
  event-loop thread in offset order; :meth:`LogSegment.write` puts bytes in the
  file and may run on an I/O thread;
- ``size`` counts tracked bytes, ``durable_size`` the bytes readers may see
  (moved forward by the log once a write is acknowledged); reads never go past
  the limit they are given;
- every method may raise ``OSError``; the owner (the partition log) turns it into
  a ``LogIOError`` and takes the partition offline.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import HEADER, HEADER_SIZE, LENGTH_END, BatchView, header_problem
from vpq.write_nodes import filenames
from vpq.write_nodes.offset_index import MAX_RELATIVE, CorruptIndexError, OffsetIndex
from vpq.write_nodes.storage import OS_STORAGE, Storage
from vpq.write_nodes.time_index import TimeIndex

_SCAN_CHUNK = 64 * 1024
NO_TIMESTAMP = -(1 << 63)


class Bookmark(NamedTuple):
    """A segment's append bookkeeping at one moment (``LogSegment.bookmark``)."""

    size: int
    next_offset: int
    max_timestamp: int
    max_ts_offset: int
    bytes_since_index: int
    index_entries: int
    time_index: tuple[int, int, int]


class LogSegment:
    """A segment starting at ``base_offset``. Create with :meth:`create` (new, empty)
    or :meth:`open` (existing file; the caller replays its batches with
    :meth:`track_append` or calls :meth:`load_trusted`). Every file call goes
    through ``storage``."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        fd: int,
        index_interval_bytes: int,
        created_ms: int,
        storage: Storage = OS_STORAGE,
    ) -> None:
        self.directory = directory
        self.storage = storage
        self.base_offset = base_offset
        self.fd = fd
        self.index_interval_bytes = index_interval_bytes
        self.created_ms = created_ms
        self.index = OffsetIndex(base_offset)
        self.time_index = TimeIndex(base_offset)
        self.size = 0
        self.durable_size = 0
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self._max_ts_offset = base_offset
        self._bytes_since_index = 0
        self.pending_io = 0  # in-flight writes/fsyncs (or a compaction) touching this segment
        self.end_marker: int | None = None  # compacted: offsets may have gaps, ends at least here
        self.closed = False

    # ---------------------------------------------------------------- lifecycle
    @classmethod
    def create(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int, storage: Storage = OS_STORAGE
    ) -> LogSegment:
        """A new, empty segment file (an existing file with that name is emptied)."""
        path = filenames.log_file(directory, base_offset)
        fd = storage.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        return cls(directory, base_offset, fd, index_interval_bytes, now_ms, storage)

    @classmethod
    def open(
        cls, directory: Path, base_offset: int, index_interval_bytes: int, now_ms: int, storage: Storage = OS_STORAGE
    ) -> LogSegment:
        """An existing segment file, with empty bookkeeping."""
        fd = storage.open(filenames.log_file(directory, base_offset), os.O_RDWR | os.O_APPEND)
        return cls(directory, base_offset, fd, index_interval_bytes, now_ms, storage)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.storage.close(self.fd)

    def delete(self) -> None:
        """Close and remove the data file and both index files."""
        self.close()
        for path in self.paths():
            try:
                self.storage.unlink(path)
            except FileNotFoundError:
                pass

    def paths(self) -> list[Path]:
        d, b = self.directory, self.base_offset
        return [
            filenames.log_file(d, b),
            filenames.index_file(d, b),
            filenames.time_index_file(d, b),
            filenames.compacted_file(d, b),
        ]

    # -------------------------------------------------------------- bookkeeping
    def fits(self, record_count: int, nbytes: int) -> bool:
        """Whether a batch of ``nbytes`` / ``record_count`` records stays within the index
        format's 32-bit relative offsets and positions."""
        return (
            self.size + nbytes <= MAX_RELATIVE
            and self.next_offset + record_count - 1 - self.base_offset <= MAX_RELATIVE
        )

    def track_append(self, base_offset: int, next_offset: int, max_timestamp: int, nbytes: int) -> int:
        """Record a batch appended at the end; returns its position in the file."""
        if base_offset != self.next_offset and (self.end_marker is None or base_offset < self.next_offset):
            raise ValueError(f"batch at {base_offset} does not follow {self.next_offset}")
        position = self.size
        if self._bytes_since_index >= self.index_interval_bytes:
            self.index.append(base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self._max_ts_offset)
            self._bytes_since_index = 0
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self._max_ts_offset = base_offset
        self._bytes_since_index += nbytes
        self.size = position + nbytes
        self.next_offset = next_offset
        return position

    def bookmark(self) -> Bookmark:
        """The bookkeeping now, for ``rewind`` (an append the disk refused)."""
        return Bookmark(
            self.size, self.next_offset, self.max_timestamp, self._max_ts_offset, self._bytes_since_index,
            len(self.index), self.time_index.last(),
        )

    def rewind(self, mark: Bookmark) -> None:
        """Forget every append tracked since ``mark`` (they were never written)."""
        self.size = mark.size
        self.next_offset = mark.next_offset
        self.max_timestamp = mark.max_timestamp
        self._max_ts_offset = mark.max_ts_offset
        self._bytes_since_index = mark.bytes_since_index
        self.index.truncate_entries(mark.index_entries)
        self.time_index.rewind(mark.time_index)

    def apply_end_marker(self) -> None:
        """After replaying a compacted segment: it ends where it ended before compaction."""
        if self.end_marker is not None and self.end_marker > self.next_offset:
            self.next_offset = self.end_marker

    def mark_durable(self, size: int) -> None:
        """Readers may now see the first ``size`` bytes."""
        if size > self.durable_size:
            self.durable_size = size

    def seal_time_index(self) -> None:
        """Make the time index end with the segment's exact max timestamp (on roll/close)."""
        if self.size:
            self.time_index.maybe_append(self.max_timestamp, self._max_ts_offset)

    # ---------------------------------------------------------------------- I/O
    def write(self, buffers: list[bytes]) -> int:
        return self.storage.write_all(self.fd, buffers)

    def file_size(self) -> int:
        return self.storage.size(self.fd)

    def pread(self, position: int, n: int) -> bytes:
        """Exactly ``n`` bytes at ``position`` unless the file ends first."""
        pread = self.storage.pread
        data = pread(self.fd, n, position)
        if len(data) == n or not data:
            return data
        parts = [data]
        got = len(data)
        while got < n:
            more = pread(self.fd, n - got, position + got)
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)

    def truncate(self, size: int) -> None:
        self.storage.truncate(self.fd, size)

    def iter_headers(self, position: int, limit: int) -> Iterator[tuple[int, tuple[int, ...]]]:
        """(position, header fields) of each batch from ``position`` whose header lies
        before ``limit`` (the batch itself may extend past it). Header fields are
        ``records.HEADER``'s. ``CorruptBatchError`` on an insane header."""
        pos = position
        while pos + HEADER_SIZE <= limit:
            chunk = self.pread(pos, min(_SCAN_CHUNK, limit - pos))
            p = 0
            while p + HEADER_SIZE <= len(chunk):
                fields = HEADER.unpack_from(chunk, p)
                base, length, magic, _crc, attrs, last_delta, _f, _m, count = fields
                problem = header_problem(base, length, magic, attrs, last_delta, count)
                if problem is not None:
                    raise CorruptBatchError(f"segment {self.base_offset} position {pos + p}: {problem}")
                yield pos + p, fields
                p += LENGTH_END + length
            if p == 0:
                return
            pos += p

    def find_position(self, offset: int, limit: int) -> tuple[int, int] | None:
        """(position, size) of the batch containing ``offset``, looking only at the
        first ``limit`` bytes; ``None`` when no such batch lies within them."""
        _, start = self.index.lookup(offset)
        for pos, fields in self.iter_headers(start, limit):
            if fields[0] + fields[5] >= offset:
                size = LENGTH_END + fields[1]
                return (pos, size) if pos + size <= limit else None
        return None

    def find_timestamp(self, timestamp: int, limit: int) -> int | None:
        """Offset of the first record with timestamp >= ``timestamp`` in the first
        ``limit`` bytes (scanning from the time index's hint), ``None`` if none."""
        _, start = self.index.lookup(self.time_index.scan_start(timestamp))
        for pos, fields in self.iter_headers(start, limit):
            if fields[7] < timestamp:
                continue
            size = LENGTH_END + fields[1]
            if pos + size > limit:
                return None
            for record in BatchView(self.pread(pos, size), 0).records():
                if record.timestamp_ms is not None and record.timestamp_ms >= timestamp:
                    return record.offset
        return None

    def read(self, offset: int, max_bytes: int, limit: int) -> bytes:
        """Whole batches starting with the one containing ``offset``, at most
        ``max_bytes`` unless the first batch alone is larger, never past ``limit``."""
        found = self.find_position(offset, limit)
        if found is None:
            return b""
        pos, first_size = found
        if first_size >= max_bytes:
            return self.pread(pos, first_size)
        data = self.pread(pos, min(max_bytes, limit - pos))
        end = 0
        n = len(data)
        while end + LENGTH_END <= n:
            length = int.from_bytes(data[end + 8 : end + 12], "big", signed=True)
            if length <= 0 or end + LENGTH_END + length > n:
                break
            end += LENGTH_END + length
        return data if end == n else data[:end]

    def headers_to_end(self, position: int, file_size: int) -> list[tuple[int, int, int, int]]:
        """(base offset, next offset, max timestamp, size) of every batch from ``position``
        to the end of the file, from headers only. ``CorruptBatchError`` if a header is
        insane, the batches do not follow each other, or the last one is cut short."""
        out: list[tuple[int, int, int, int]] = []
        expected = -1
        end = position
        for pos, fields in self.iter_headers(position, file_size):
            base, length, count, max_ts = fields[0], fields[1], fields[8], fields[7]
            if expected >= 0 and base != expected and (self.end_marker is None or base < expected):
                raise CorruptBatchError(f"segment {self.base_offset} position {pos}: offset gap")
            expected = base + count
            end = pos + LENGTH_END + length
            out.append((base, expected, max_ts, LENGTH_END + length))
        if end != file_size:
            raise CorruptBatchError(f"segment {self.base_offset}: batches end at {end}, file at {file_size}")
        return out

    # ------------------------------------------------------------------ indexes
    def write_indexes(self, fsync: Callable[[int], None] | None) -> list[Path]:
        """Write both index files (temporary file then rename), calling ``fsync`` on
        each before the rename when given. The rename itself is made durable by the
        next directory fsync. Returns the paths written. Call :meth:`seal_time_index`
        first (on the loop thread): this may run on the I/O thread and reads the
        indexes without changing them."""
        written = []
        for path, data in (
            (filenames.index_file(self.directory, self.base_offset), self.index.to_bytes()),
            (filenames.time_index_file(self.directory, self.base_offset), self.time_index.to_bytes()),
        ):
            tmp = filenames.tmp_file(path)
            storage = self.storage
            fd = storage.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                if data:
                    storage.write_all(fd, [data])
                if fsync is not None:
                    fsync(fd)
            finally:
                storage.close(fd)
            storage.replace(tmp, path)
            written.append(path)
        return written

    def remove_index_files(self) -> None:
        for path in (
            filenames.index_file(self.directory, self.base_offset),
            filenames.time_index_file(self.directory, self.base_offset),
        ):
            try:
                self.storage.unlink(path)
            except FileNotFoundError:
                pass

    def load_trusted(self) -> None:
        """Bookkeeping for a segment below the recovery point: its bytes were fsynced
        and its indexes written, so load the index files (sanity-checked) and read only
        the batch headers after the last index entry. A missing or insane index is
        rebuilt from all the headers. CRCs are not checked (they were when written).
        ``CorruptBatchError`` if the headers themselves are not sane."""
        file_size = self.file_size()
        directory, base = self.directory, self.base_offset
        try:
            idx: OffsetIndex | None = OffsetIndex.from_bytes(
                base, self._read_file(filenames.index_file(directory, base)), file_size
            )
        except (CorruptIndexError, FileNotFoundError):
            idx = None
        tail: list[tuple[int, int, int, int]] = []
        tidx: TimeIndex | None = None
        if idx is not None and len(idx):
            start_offset, start_pos = idx.last_entry()
            try:
                tail = self.headers_to_end(start_pos, file_size)
                if not tail or tail[0][0] != start_offset:
                    raise CorruptIndexError("index does not point at a batch")
                tidx = TimeIndex.from_bytes(
                    base, self._read_file(filenames.time_index_file(directory, base)), tail[-1][1]
                )
            except (CorruptBatchError, CorruptIndexError, FileNotFoundError):
                tidx = None
        if idx is None or tidx is None or tidx.max_timestamp is None:
            self._replay(self.headers_to_end(0, file_size))
        else:
            self.index = idx
            self.time_index = tidx
            self.max_timestamp = tidx.max_timestamp
            self._max_ts_offset = tidx.entries()[-1][1]
            self.size = start_pos
            self.next_offset = start_offset
            self._bytes_since_index = 0  # the entry we resume from is already in the index
            self._replay(tail)
        self.apply_end_marker()
        self.durable_size = self.size
        first = self.first_timestamp() if self.size else None
        if first is not None:
            self.created_ms = min(self.created_ms, first)

    def _replay(self, batches: list[tuple[int, int, int, int]]) -> None:
        for base, next_offset, max_ts, size in batches:
            if base != self.next_offset and (self.end_marker is None or base < self.next_offset):
                raise CorruptBatchError(f"segment {self.base_offset}: batch {base} does not follow {self.next_offset}")
            self.track_append(base, next_offset, max_ts, size)

    def first_timestamp(self) -> int | None:
        """The first timestamp of the first batch, ``None`` for an empty segment."""
        head = self.pread(0, HEADER_SIZE)
        if len(head) < HEADER_SIZE:
            return None
        return int(HEADER.unpack_from(head, 0)[6])

    def _read_file(self, path: Path) -> bytes:
        return self.storage.read_file(path)
