"""StatsWriter: a write node's exporter of per-window traffic statistics.

Layout: ``<stats_dir>/date=YYYY-MM-DD/<node>-w<start>-<len>.parquet``, one file
per (node, window), date = UTC date of the window start. Contract:

- ``write_window`` is atomic: the table goes to a hidden temp file in the same
  directory (readers, Spark included, skip names starting with ``.``), is
  fsynced, then renamed over the final name; the directory is fsynced too. A
  reader sees the whole file or none. Writing the same window again replaces it.
- A window with no traffic still produces a file holding one heartbeat row
  (see ``stats_schema``), so the job can tell an idle node from a missing one.
- Retention: ``prune(now_ms)`` deletes THIS node's files whose window ended more
  than ``retention_ms`` before ``now_ms`` (other nodes prune their own), stray
  temp files of this node, and empty date directories older than the cutoff
  date. ``start()`` prunes once; write nodes call ``prune`` periodically (e.g.
  after each window).

Pure pyarrow (no Spark). Not thread-safe: one writer per node, one caller.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterable
from pathlib import Path

import pyarrow.parquet as pq

from vpq.traffic.stats_schema import (
    DATE_PARTITION,
    TrafficRow,
    check_node_id,
    date_of,
    file_name,
    parse_file_name,
    to_arrow_table,
)

DEFAULT_RETENTION_MS = 24 * 3600 * 1000
_TMP_PREFIX = ".tmp-"
_TMP_SUFFIX_RE = re.compile(r"[0-9a-f]{32}\.parquet")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class StatsWriter:
    """Writes one node's traffic windows as Parquet files under ``stats_dir``."""

    def __init__(self, stats_dir: str | Path, node_id: str, retention_ms: int = DEFAULT_RETENTION_MS) -> None:
        if not isinstance(retention_ms, int) or retention_ms < 1:
            raise ValueError(f"retention_ms must be an int >= 1, got {retention_ms!r}")
        self.stats_dir = Path(stats_dir)
        self.node_id = check_node_id(node_id)
        self.retention_ms = retention_ms
        self._started = False

    def start(self, now_ms: int | None = None) -> None:
        """Create ``stats_dir`` and, when ``now_ms`` is given, prune old files once."""
        self.stats_dir.mkdir(parents=True, exist_ok=True)
        self._started = True
        if now_ms is not None:
            self.prune(now_ms)

    def stop(self) -> None:
        """Stop accepting windows (files already written stay)."""
        self._started = False

    def _check_started(self) -> None:
        if not self._started:
            raise RuntimeError("StatsWriter is not started")

    def path_for(self, window_start_ms: int, window_ms: int) -> Path:
        """Where the file of one window of this node goes."""
        return (
            self.stats_dir
            / f"{DATE_PARTITION}={date_of(window_start_ms)}"
            / file_name(self.node_id, window_start_ms, window_ms)
        )

    def write_window(self, window_start_ms: int, window_ms: int, rows: Iterable[TrafficRow]) -> Path:
        """Atomically write one window's rows (validated first; nothing is written
        when one is invalid). Returns the final path."""
        self._check_started()
        table = to_arrow_table(window_start_ms, window_ms, self.node_id, list(rows))
        final = self.path_for(window_start_ms, window_ms)
        tmp = final.parent / f"{_TMP_PREFIX}{self.node_id}-{uuid.uuid4().hex}.parquet"
        for attempt in range(2):
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                with open(tmp, "wb") as f:
                    pq.write_table(table, f, compression="zstd")
                    f.flush()
                    os.fsync(f.fileno())
                break
            except FileNotFoundError:
                # the date directory was pruned between mkdir and open: recreate once
                if attempt:
                    raise
        try:
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(final.parent)
        return final

    def own_files(self) -> list[tuple[int, int, Path]]:
        """This node's stats files as ``(window_start_ms, window_ms, path)``, oldest first."""
        out: list[tuple[int, int, Path]] = []
        if not self.stats_dir.is_dir():
            return out
        for day in self.stats_dir.iterdir():
            if not day.is_dir() or not day.name.startswith(f"{DATE_PARTITION}="):
                continue
            for f in day.iterdir():
                parsed = parse_file_name(f.name)
                if parsed is not None and parsed[0] == self.node_id:
                    out.append((parsed[1], parsed[2], f))
        out.sort(key=lambda t: (t[0], t[1], t[2].name))
        return out

    def _is_own_tmp(self, name: str) -> bool:
        prefix = f"{_TMP_PREFIX}{self.node_id}-"
        return name.startswith(prefix) and _TMP_SUFFIX_RE.fullmatch(name[len(prefix):]) is not None

    def prune(self, now_ms: int) -> int:
        """Apply retention as of ``now_ms``; returns how many files were deleted."""
        cutoff = now_ms - self.retention_ms
        deleted = 0
        for start, length, path in self.own_files():
            if start + length <= cutoff:
                path.unlink(missing_ok=True)
                deleted += 1
        if not self.stats_dir.is_dir():
            return deleted
        cutoff_day = f"{DATE_PARTITION}={date_of(max(cutoff, 0))}"
        for day in sorted(self.stats_dir.iterdir()):
            if not day.is_dir() or not day.name.startswith(f"{DATE_PARTITION}="):
                continue
            for f in day.iterdir():
                if self._is_own_tmp(f.name):
                    f.unlink(missing_ok=True)
            if day.name < cutoff_day:
                try:
                    day.rmdir()
                except OSError:
                    pass  # not empty: other nodes' files still within their retention
        return deleted
