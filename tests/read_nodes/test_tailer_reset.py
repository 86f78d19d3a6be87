"""``require()`` while the tailer's long poll is in flight: the read is abandoned at
once and the tailer re-reads from the required offset; stopping still stops."""

from __future__ import annotations

import asyncio

from tests.read_nodes.test_tailer_gaps import Directory, Result, _resolve, batch
from vpq.read_nodes.record_cache import RecordCache
from vpq.read_nodes.tailer import PartitionTailer, RecordSource


class EndlessTail:
    """Batches 0-4; a read at the end long-polls for a whole minute."""

    def __init__(self) -> None:
        self.data = batch(0, 5)
        self.reads: list[int] = []
        self.cancelled = 0

    async def read(self, address: str, pp: int, offset: int, max_bytes: int, wait_ms: int) -> Result:
        self.reads.append(offset)
        if offset >= 5:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        return Result(self.data, 0, 5)


async def _until(cond: object, what: str) -> None:
    for _ in range(200):
        if cond():  # type: ignore[operator]
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


async def test_require_abandons_the_long_poll_and_reads_again_from_the_offset() -> None:
    log = EndlessTail()
    source = RecordSource(log, Directory(), _resolve, RecordCache(1 << 20))  # type: ignore[arg-type]
    tailer = PartitionTailer(0, source, wait_ms=60_000, retry_ms=10)
    tailer.start(3)
    try:
        await _until(lambda: log.reads == [3, 5], "the long poll at the end")
        assert tailer.index.start_offset(0) == 3
        tailer.require(1)
        await _until(lambda: log.reads[-1] == 5 and len(log.reads) == 4, "the re-read from 1")
        assert log.reads == [3, 5, 1, 5]
        assert log.cancelled == 1  # the minute-long poll did not run to its end
        assert tailer.covers(1)
        assert [o for o, _ in tailer.index.entries_from(0, 7, 0, 100, None)] == [1, 2, 3, 4]
        assert tailer.errors == 0
    finally:
        await tailer.stop()
    assert log.cancelled == 2  # stop() cancels the poll in flight and the loop ends
    assert not tailer.running
