"""Opening a partition directory: trust what the checkpoint covers, validate the rest.

Contract of :meth:`LogLoader.load`:
- leftover temporary files are removed; a missing directory is created;
- a segment whose successor starts at or below the recovery point R (from the
  checkpoint) is *trusted*: its index files are loaded (rebuilt from headers when
  they fail the sanity checks) and its CRCs are not recomputed;
- every other segment (always including the last one) is *scanned* batch by
  batch: header sanity (magic, lengths, counts), the batch must fit in the file,
  its base offset must continue the previous batch, and its CRC32C must match;
- at the first torn or corrupt byte the segment is truncated there, and every
  later segment is deleted: everything before the damage is kept, nothing after
  it is ever served; indexes of scanned segments are rebuilt in memory (their
  stale files are removed and rewritten at roll or clean close);
- a compacted segment (one with a valid ``<base>.compacted`` end marker,
  ``write_nodes.end_marker``) may have offset gaps between its batches and ends at
  its marker's offset, so the next segment still continues it; a missing index of
  it is rebuilt from its headers. If such a segment is damaged, its marker is
  removed with the damage (the log then ends at the last good batch);
- an empty directory yields one empty segment at offset 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from vpq.codec.errors import CorruptBatchError
from vpq.codec.records import CRC_START, HEADER, HEADER_SIZE, LENGTH_END, header_problem
from vpq.write_nodes import filenames
from vpq.write_nodes.checkpoint import read_checkpoint
from vpq.write_nodes.end_marker import read_end_marker
from vpq.write_nodes.segment import LogSegment
from vpq.write_nodes.segments import LogSegments
from vpq.write_nodes.storage import OS_STORAGE, Storage, fsync_directory

_SCAN_CHUNK = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening the log found and did."""

    bytes_truncated: int
    batches_checked: int
    segments_checked: int
    segments_trusted: int
    segments_deleted: int
    duration_s: float
    recovered_end_offset: int
    start_offset: int
    recovery_point: int | None
    problem: str | None  # the first corruption met, None when the log was intact


@dataclass(slots=True)
class _ScanResult:
    valid_size: int
    batches: int
    problem: str | None


class LogLoader:
    """Loads (and repairs) the segments of one partition directory, through ``storage``."""

    def __init__(self, directory: Path, index_interval_bytes: int, now_ms: int, storage: Storage = OS_STORAGE) -> None:
        self.directory = directory
        self.index_interval_bytes = index_interval_bytes
        self.now_ms = now_ms
        self.storage = storage

    def load(self) -> tuple[LogSegments, RecoveryReport]:
        """Open every segment, repairing as described in the module docstring.
        Raises ``OSError`` on I/O failure (the caller wraps it)."""
        started = time.monotonic()
        storage = self.storage
        storage.makedirs(self.directory)
        for tmp in filenames.list_tmp_files(self.directory, storage):
            storage.unlink(tmp)
        recovery_point = read_checkpoint(self.directory, storage)
        bases = filenames.list_segment_bases(self.directory, storage)
        self._remove_orphan_indexes(set(bases))
        segments = LogSegments()
        try:
            return self._load(bases, recovery_point, segments, started)
        except BaseException:
            for seg in segments:
                seg.close()
            raise

    def _load(
        self, bases: list[int], recovery_point: int | None, segments: LogSegments, started: float
    ) -> tuple[LogSegments, RecoveryReport]:
        scanned: list[LogSegment] = []
        truncated = 0
        checked = trusted = deleted = batches = 0
        problem: str | None = None
        expected: int | None = None
        for i, base in enumerate(bases):
            if problem is not None:
                truncated += self._delete_files(base)
                deleted += 1
                continue
            if expected is not None and base != expected:
                problem = f"segment {base} does not continue the log at {expected}"
                truncated += self._delete_files(base)
                deleted += 1
                continue
            seg = self._open_segment(base)
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            if recovery_point is not None and next_base is not None and next_base <= recovery_point:
                if self._try_trusted(seg, next_base):
                    trusted += 1
                    segments.add(seg)
                    expected = seg.next_offset
                    continue
                seg.close()
                seg = self._open_segment(base)
            file_size = seg.file_size()
            result = self._scan(seg, file_size)
            checked += 1
            batches += result.batches
            seg.remove_index_files()
            if result.problem is not None:
                problem = f"segment {base} position {result.valid_size}: {result.problem}"
                seg.truncate(result.valid_size)
                truncated += file_size - result.valid_size
                if seg.end_marker is not None:
                    seg.end_marker = None
                    self.storage.unlink(filenames.compacted_file(self.directory, base))
            else:
                seg.apply_end_marker()
            self.storage.fsync(seg.fd)  # what we accept as the log is on disk from now on
            scanned.append(seg)
            seg.mark_durable(seg.size)
            first = seg.first_timestamp() if seg.size else None
            if first is not None:  # a segment's age counts from its first record
                seg.created_ms = min(self.now_ms, first)
            segments.add(seg)
            expected = seg.next_offset
        if not len(segments):
            segments.add(LogSegment.create(self.directory, 0, self.index_interval_bytes, self.now_ms, self.storage))
        first = segments.first
        active = segments.active
        assert first is not None and active is not None
        for seg in scanned:
            if seg is not active:  # it may be trusted next time: give it durable index files
                seg.seal_time_index()
                seg.write_indexes(self.storage.fsync)
        fsync_directory(self.storage, self.directory)
        report = RecoveryReport(
            bytes_truncated=truncated,
            batches_checked=batches,
            segments_checked=checked,
            segments_trusted=trusted,
            segments_deleted=deleted,
            duration_s=time.monotonic() - started,
            recovered_end_offset=active.next_offset,
            start_offset=first.base_offset,
            recovery_point=recovery_point,
            problem=problem,
        )
        return segments, report

    def _open_segment(self, base: int) -> LogSegment:
        seg = LogSegment.open(self.directory, base, self.index_interval_bytes, self.now_ms, self.storage)
        seg.end_marker = read_end_marker(self.storage, self.directory, base)
        return seg

    def _try_trusted(self, seg: LogSegment, next_base: int) -> bool:
        try:
            seg.load_trusted()
        except CorruptBatchError:
            return False
        return seg.next_offset == next_base

    def _scan(self, seg: LogSegment, file_size: int) -> _ScanResult:
        """Validate batches from position 0, tracking each valid one in ``seg``."""
        pos = 0
        buf = b""
        buf_start = 0
        count = 0
        expected = seg.base_offset
        while pos < file_size:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                if file_size - pos < HEADER_SIZE:
                    return _ScanResult(pos, count, "torn batch header")
                buf = seg.pread(pos, min(_SCAN_CHUNK, file_size - pos))
                buf_start, rel = pos, 0
            base, length, magic, crc, attrs, last_delta, _first_ts, max_ts, n = HEADER.unpack_from(buf, rel)
            problem = header_problem(base, length, magic, attrs, last_delta, n)
            if problem is not None:
                return _ScanResult(pos, count, problem)
            size = LENGTH_END + length
            if pos + size > file_size:
                return _ScanResult(pos, count, "torn batch")
            if base != expected and (seg.end_marker is None or base < expected):
                return _ScanResult(pos, count, f"base offset {base}, expected {expected}")
            if rel + size > len(buf):
                buf = seg.pread(pos, max(size, min(_SCAN_CHUNK, file_size - pos)))
                buf_start, rel = pos, 0
            if crc32c(memoryview(buf)[rel + CRC_START : rel + size]) != crc:
                return _ScanResult(pos, count, "CRC mismatch")
            if not seg.fits(n, size):
                return _ScanResult(pos, count, "segment exceeds the index format")
            seg.track_append(base, base + n, max_ts, size)
            expected = base + n
            pos += size
            count += 1
        return _ScanResult(pos, count, None)

    def _delete_files(self, base: int) -> int:
        """Remove a segment's files; returns the bytes of data removed."""
        size = 0
        storage = self.storage
        for path in (
            filenames.log_file(self.directory, base),
            filenames.index_file(self.directory, base),
            filenames.time_index_file(self.directory, base),
            filenames.compacted_file(self.directory, base),
        ):
            try:
                if path.suffix == filenames.LOG_SUFFIX:
                    size = storage.file_size(path)
                storage.unlink(path)
            except FileNotFoundError:
                pass
        return size

    def _remove_orphan_indexes(self, bases: set[int]) -> None:
        for name in self.storage.listdir(self.directory):
            for suffix in (filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX, filenames.COMPACTED_SUFFIX):
                base = filenames.parse_base_offset(name, suffix)
                if base is not None and base not in bases:
                    self.storage.unlink(self.directory / name)
