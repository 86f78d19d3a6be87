"""The tailer's read-ahead: reads further than ``read_ahead_bytes`` past the most
advanced reader are indexed but neither decoded nor cached; a reader that comes to
them reads them back; the index (and so the lag) covers everything read."""

from __future__ import annotations

import asyncio

from tests.codec.format1 import build_batch
from tests.read_nodes.test_tailer_gaps import Directory, Result
from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import Record
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.record_cache import RecordCache
from vpq.read_nodes.tailer import PartitionTailer, RecordSource, pack_ref

BATCH = 20
VALUE = 1000


def _records(base: int, n: int) -> list[Record]:
    return [
        Record(value=bytes([base % 251]) * VALUE, queue_id=7, key=b"k%d" % ((base + i) % 3), key_hash=(base + i) % 3,
               context_id=(base + i) % 2)
        for i in range(n)
    ]


class Log:
    """Batches of ``BATCH`` records of about 1 KB; a read answers whole batches from
    the one holding ``offset`` up to ``max_bytes`` (at least one)."""

    def __init__(self, batches: int) -> None:
        self.batches: list[bytes] = []
        self.reads: list[int] = []
        self.extend(batches)

    @property
    def end(self) -> int:
        return len(self.batches) * BATCH

    def extend(self, batches: int) -> None:
        for _ in range(batches):
            base = self.end
            self.batches.append(build_columnar_batch(base, 1000, columns_of(_records(base, BATCH), 1000)))

    async def read(self, address: str, pp: int, offset: int, max_bytes: int, wait_ms: int) -> Result:
        self.reads.append(offset)
        if offset >= self.end:
            await asyncio.sleep(wait_ms / 1000)
        out: list[bytes] = []
        size = 0
        for b in self.batches[offset // BATCH:]:
            if out and size + len(b) > max_bytes:
                break
            out.append(b)
            size += len(b)
        return Result(b"".join(out), 0, self.end)


async def _ctx(ctx_id: int) -> IsolationContext:
    return IsolationContext(env=f"e{ctx_id}")


async def _until(check, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(timeout_s / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


def _tailer(log: Log, read_ahead: int) -> tuple[PartitionTailer, RecordSource]:
    source = RecordSource(log, Directory(), _ctx, RecordCache(64 << 20), fetch_max_bytes=4 * BATCH * VALUE)  # type: ignore[arg-type]
    tailer = PartitionTailer(0, source, max_bytes=2 * BATCH * VALUE, wait_ms=20, retry_ms=10,
                             read_ahead_bytes=read_ahead)
    return tailer, source


async def test_reads_past_the_bound_are_indexed_only_and_read_back_when_wanted() -> None:
    log = Log(batches=50)  # 1,000 records, about 1 MB
    tailer, source = _tailer(log, read_ahead=10 * BATCH * VALUE)
    tailer.add_listener("g", lambda _pp: None)
    tailer.set_position("g", 0, scanned_to=0)
    tailer.start(0)
    try:
        await _until(lambda: tailer.index.end_offset(0) >= log.end)
        # the index covers every record, with its context and key hash
        entries = tailer.index.entries_from(0, 7, 0, 10_000, None)
        assert [o for o, _ in entries] == list(range(log.end))
        assert all(ref == pack_ref(o % 2, o % 3) for o, ref in entries)
        # what lies within the bound (plus the read that crossed it) is cached, the rest is not
        cached = [o for o in range(log.end) if source.cached(0, o) is not None]
        assert cached == list(range(len(cached))) and 200 <= len(cached) <= 260
        assert tailer.records_indexed_only == log.end - len(cached)
        # a reader that comes to an index-only record reads it back, neighbours with it
        fetches = source.fetches
        far = log.end - 100
        got = await source.get(0, far)
        assert got is not None and got.offset == far and got.value == bytes([(far - far % BATCH) % 251]) * VALUE
        assert got.ctx == IsolationContext(env=f"e{far % 2}")
        assert source.fetches == fetches + 1 and source.cached(0, far + 1) is not None
        # once the reader has scanned to the tail, new records are decoded and cached again
        tailer.set_position("g", 0, scanned_to=log.end)
        old_end = log.end
        log.extend(3)
        await _until(lambda: tailer.index.end_offset(0) >= log.end)
        assert all(source.cached(0, o) is not None for o in range(old_end, log.end))
    finally:
        await tailer.stop()


async def test_without_a_bound_or_a_reader_everything_read_is_cached() -> None:
    for read_ahead, report in ((0, True), (5 * BATCH * VALUE, False)):
        log = Log(batches=30)
        tailer, source = _tailer(log, read_ahead=read_ahead)
        tailer.add_listener("g", lambda _pp: None)
        if report:
            tailer.set_position("g", 0, scanned_to=0)
        tailer.start(0)
        try:
            await _until(lambda: tailer.index.end_offset(0) >= log.end)
            assert all(source.cached(0, o) is not None for o in range(log.end))
            assert tailer.records_indexed_only == 0
        finally:
            await tailer.stop()


def test_index_rows_match_the_decoded_records_of_both_formats() -> None:
    data = build_columnar_batch(40, 1000, columns_of(_records(40, 5), 1000)) + build_batch(45, _records(45, 4), 1000)
    rows, end = RecordSource.index_rows(data, 42)
    assert end == 49
    assert rows == [(o, 7, pack_ref(o % 2, o % 3), o % 2) for o in range(42, 49)]
