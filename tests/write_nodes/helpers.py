"""Shared helpers for the write_nodes tests."""

from __future__ import annotations

from typing import Any

from vpq.codec.records import Record, decode_batches
from vpq.config.settings import LogSettings
from vpq.write_nodes.log import PartitionLog


def small_settings(**overrides: Any) -> LogSettings:
    """Tiny segments and a dense index so a few appends cross several segments."""
    base: dict[str, Any] = {
        "segment_bytes": 4096,
        "index_interval_bytes": 256,
        "retention_ms": -1,
        "retention_bytes": -1,
        "checkpoint_interval_ms": 60_000,
    }
    base.update(overrides)
    return LogSettings(**base)


def threaded_settings(**overrides: Any) -> LogSettings:
    """``small_settings`` where the I/O thread does every write, never the loop
    (``inline_commit_idle_ms`` 0): for tests that block the thread inside its fsync."""
    return small_settings(inline_commit_idle_ms=0, **overrides)


def make_records(tag: str, count: int, size: int = 40) -> list[Record]:
    return [
        Record(
            value=(f"{tag}-{i}-".encode() * size)[:size],
            queue_id=len(tag),
            virtual_partition=i % 4,
            key_hash=i,
            key=f"{tag}-{i}".encode(),
        )
        for i in range(count)
    ]


def read_all(log: PartitionLog, start: int | None = None, max_bytes: int = 700) -> list[Record]:
    """Every readable record from ``start`` (default: the log start), CRC-checked."""
    cursor = log.start_offset if start is None else start
    out: list[Record] = []
    while True:
        data = log.read(cursor, max_bytes)
        if not data:
            return out
        fresh = [r for r in decode_batches(data, verify=True) if r.offset >= cursor]
        assert fresh and fresh[0].offset == cursor, "read must resume exactly where the reader is"
        out.extend(fresh)
        cursor = fresh[-1].offset + 1
