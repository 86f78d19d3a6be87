"""The tailer over a compacted log: offsets with gaps, and a range compacted away up to
the durable end (an empty answer below the end must move the tailer, not spin on it)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import Record
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.record_cache import RecordCache
from vpq.read_nodes.tailer import PartitionTailer, RecordSource


@dataclass
class Result:
    data: bytes
    start_offset: int
    end_offset: int


@dataclass
class Ref:
    address: str = "w"


class Directory:
    async def owner(self, pp: int) -> Ref:
        return Ref()

    def invalidate(self, pp: int) -> None:
        return None


def batch(base: int, n: int) -> bytes:
    records = [Record(value=f"v{base + i}".encode(), queue_id=7, key=b"k") for i in range(n)]
    return build_columnar_batch(base, 1000, columns_of(records, 1000))


class CompactedLog:
    """Surviving batches at 0-2 and 10-11; 12..19 compacted away; durable end 20, then 20-21."""

    def __init__(self) -> None:
        self.batches = {0: (3, batch(0, 3)), 10: (2, batch(10, 2))}
        self.end = 20
        self.reads: list[int] = []

    async def read(self, address: str, pp: int, offset: int, max_bytes: int, wait_ms: int) -> Result:
        self.reads.append(offset)
        if offset >= self.end:  # long poll at the end, as the write node does
            await asyncio.sleep(wait_ms / 1000)
        end = self.end  # the durable end first, then the data: all of it lies below
        data = b"".join(b for base, (n, b) in sorted(self.batches.items()) if base + n > offset)
        return Result(data, 0, end)


async def _resolve(ctx_id: int) -> IsolationContext:
    return IsolationContext()


async def test_tailer_follows_gaps_and_moves_past_a_range_compacted_to_the_end() -> None:
    log = CompactedLog()
    source = RecordSource(log, Directory(), _resolve, RecordCache(1 << 20))  # type: ignore[arg-type]
    tailer = PartitionTailer(0, source, wait_ms=50, retry_ms=10)
    tailer.start(0)
    try:
        for _ in range(100):
            await asyncio.sleep(0.01)
            if tailer.index.end_offset(0) >= 20:
                break
        assert tailer.index.end_offset(0) == 20
        assert [o for o, _ in tailer.index.entries_from(0, 7, 0, 100, None)] == [0, 1, 2, 10, 11]
        spins = len(log.reads)
        await asyncio.sleep(0.2)
        assert len(log.reads) - spins <= 6, "the tailer spins on a compacted range"
        log.batches[20] = (2, batch(20, 2))
        log.end = 22
        for _ in range(100):
            await asyncio.sleep(0.01)
            if tailer.index.end_offset(0) >= 22:
                break
        assert [o for o, _ in tailer.index.entries_from(0, 7, 20, 100, None)] == [20, 21]
    finally:
        await tailer.stop()
