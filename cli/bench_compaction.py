"""``vpq bench compaction``: what compaction gives back and what it costs producers.

Every round starts from a fresh partition log (real files, this machine's disk) filled
with ``--fill-mb`` MB in which queue 1 holds 90 % of the bytes and queue 2 the rest,
in batches of ``--batch`` records of ``--record-bytes``: either batches of one queue
each (nine of queue 1, then one of queue 2) or, with ``mixed``, every batch holding
both (records of queue 2 at every tenth place). The filling is not timed (no fsync);
the log is then reopened with the settings under test (fsync per group commit).

1. **Disk use** (each layout once): queue 1 is deleted (the policy no longer lists
   it), one compaction pass runs, and the partition's bytes are measured before and
   after (``after/before``, goal <= 0.20), with the pass's duration against the
   default ``log.compaction_interval_ms`` (the disk must come back within one
   interval). Every record of queue 2 is then read back at its original offset.
2. **Produce throughput** under compaction: ``--rounds`` pairs of rounds, alternating
   *with* (``--concurrency`` appenders of ``--batch`` records while one compaction pass
   of the whole deleted queue runs, over mixed batches, the costlier layout; the round
   lasts as long as the pass) and
   *without* (the same appenders for the same time, no compaction), each on a fresh
   log whose filling was written back (``os.sync``) before the round; pairs alternate
   which round goes first. ``ratio = median(with) / median(without)`` (goal >= 0.8); the median of each
   pair's own ratio is printed too (it is the steadier figure when the machine's load
   drifts between rounds).

The last line printed is one JSON object.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import orjson
import typer

from vpq.cli.progress import Stages
from vpq.codec.batch_common import VALUE_RAW
from vpq.codec.records import Record, decode_batches
from vpq.common import event_loop
from vpq.config.settings import LogSettings
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.retention import QueuePolicy

DELETED, KEPT = 1, 2
_AFTER_DELETE = QueuePolicy({KEPT: -1}, known_below=KEPT)


def _record(queue_id: int, i: int, value: bytes) -> Record:
    return Record(value=value, queue_id=queue_id, virtual_partition=i % 16, key_hash=i, value_encoding=VALUE_RAW,
                  key=f"k{i}".encode())


def _batches(batch: int, record_bytes: int, mixed: bool) -> list[list[Record]]:
    """Ten batches: 90 % of the bytes for queue 1, 10 % for queue 2."""
    value = os.urandom(record_bytes)
    if mixed:
        return [[_record(KEPT if i % 10 == 9 else DELETED, i, value) for i in range(batch)] for _ in range(10)]
    return [[_record(DELETED, i, value) for i in range(batch)] for _ in range(9)] + [
        [_record(KEPT, i, value) for i in range(batch)]
    ]


async def _fill(directory: Path, settings: LogSettings, fill_bytes: int, batches: list[list[Record]]) -> int:
    """Fill without fsync; returns how many records of queue 2 were written."""
    log = PartitionLog(directory, settings.model_copy(update={"fsync_policy": "none"}))
    await log.start()
    kept = 0
    try:
        while log.size_bytes < fill_bytes:
            for b in batches:
                await log.append(b)
                kept += sum(1 for r in b if r.queue_id == KEPT)
    finally:
        await log.stop()
    os.sync()  # the fill's dirty pages are written back now, not during the measured round
    return kept


def _kept_records(log: PartitionLog) -> int:
    cursor, n = log.start_offset, 0
    while True:
        data = log.read(cursor, 4 << 20)
        if not data:
            return n
        records = [r for r in decode_batches(data, verify=True) if r.offset >= cursor]
        n += sum(1 for r in records if r.queue_id == KEPT)
        cursor = records[-1].offset + 1


async def _disk_use(work: Path, settings: LogSettings, fill_bytes: int, batch: int, record_bytes: int,
                    mixed: bool) -> dict[str, float | int | bool]:
    directory = work / f"disk-{'mixed' if mixed else 'plain'}"
    kept = await _fill(directory, settings, fill_bytes, _batches(batch, record_bytes, mixed))
    log = PartitionLog(directory, settings)
    await log.start()
    try:
        before = log.size_bytes
        t0 = time.perf_counter()
        done = await log.compact(_AFTER_DELETE)
        seconds = time.perf_counter() - t0
        after = log.size_bytes
        intact = _kept_records(log) == kept
    finally:
        await log.stop()
        shutil.rmtree(directory, ignore_errors=True)
    return {"before": before, "after": after, "ratio": round(after / before, 4), "seconds": round(seconds, 3),
            "segments": done.segments, "kept_records_intact": intact}


async def _produce_round(work: Path, name: str, settings: LogSettings, fill_bytes: int, batch: int,
                         record_bytes: int, concurrency: int, compact: bool, seconds: float) -> tuple[float, float]:
    """(records/s of the appenders, round seconds)."""
    directory = work / name
    await _fill(directory, settings, fill_bytes, _batches(batch, record_bytes, True))
    log = PartitionLog(directory, settings)
    await log.start()
    value = os.urandom(record_bytes)
    sources = [[_record(KEPT, c * batch + i, value) for i in range(batch)] for c in range(concurrency)]
    appended = [0]
    stop = asyncio.Event()

    async def appender(records: list[Record]) -> None:
        while not stop.is_set():
            await log.append(records)
            appended[0] += len(records)

    try:
        tasks = [asyncio.create_task(appender(r)) for r in sources]
        t0 = time.perf_counter()
        if compact:
            await log.compact(_AFTER_DELETE)
        else:
            await asyncio.sleep(seconds)
        elapsed = time.perf_counter() - t0
        stop.set()
        await asyncio.gather(*tasks)
    finally:
        await log.stop()
        shutil.rmtree(directory, ignore_errors=True)
        os.sync()
    return appended[0] / elapsed, elapsed


async def _run(work: Path, settings: LogSettings, fill_bytes: int, batch: int, record_bytes: int, concurrency: int,
               rounds: int, stages: Stages) -> dict[str, object]:
    stages.stage("disk use: delete the queue holding 90 % of the bytes, one compaction pass")
    disk = {
        "plain": await _disk_use(work, settings, fill_bytes, batch, record_bytes, False),
        "mixed": await _disk_use(work, settings, fill_bytes, batch, record_bytes, True),
    }
    stages.stage(f"produce throughput: {rounds} x (with compaction, without), alternating")
    with_rates: list[float] = []
    without_rates: list[float] = []
    seconds = 0.0
    for i in range(rounds):
        # the first pair measures a pass's length; later pairs alternate which goes first
        if i % 2 == 0 or seconds == 0.0:
            rate, seconds = await _produce_round(work, f"with-{i}", settings, fill_bytes, batch, record_bytes,
                                                 concurrency, True, 0.0)
            rate2, _ = await _produce_round(work, f"without-{i}", settings, fill_bytes, batch, record_bytes,
                                            concurrency, False, seconds)
        else:
            rate2, _ = await _produce_round(work, f"without-{i}", settings, fill_bytes, batch, record_bytes,
                                            concurrency, False, seconds)
            rate, seconds = await _produce_round(work, f"with-{i}", settings, fill_bytes, batch, record_bytes,
                                                 concurrency, True, 0.0)
        with_rates.append(rate)
        without_rates.append(rate2)
        stages.echo(f"round {i + 1}: with compaction {rate:,.0f} rec/s ({seconds:.2f} s), without {rate2:,.0f} rec/s")
    return {"disk": disk, "with": with_rates, "without": without_rates}


def bench_compaction(
    fill_mb: int = typer.Option(256, help="MB in the partition before the queue is deleted"),
    record_bytes: int = typer.Option(1024, help="value size of each record"),
    batch: int = typer.Option(100, help="records per append (one batch)"),
    concurrency: int = typer.Option(8, help="concurrent appenders during the throughput rounds"),
    segment_mb: int = typer.Option(8, help="segment size in MiB"),
    rounds: int = typer.Option(3, help="pairs of throughput rounds (with, without)"),
    max_bytes_per_s: int = typer.Option(
        LogSettings().compaction_max_bytes_per_s, help="log.compaction_max_bytes_per_s under test (0 = no limit)"
    ),
    duty_cycle: float = typer.Option(LogSettings().compaction_duty_cycle, help="log.compaction_duty_cycle under test"),
    dir: Path | None = typer.Option(None, "--dir", help="parent directory for the data (default: current directory)"),
    use_uvloop: bool = typer.Option(True, "--uvloop/--no-uvloop", help="run on uvloop when installed"),
) -> None:
    """Disk given back by compaction after a queue delete, and produce throughput while it runs."""
    settings = LogSettings(
        segment_bytes=segment_mb * 1024 * 1024,
        retention_ms=-1,
        compaction_max_bytes_per_s=max_bytes_per_s,
        compaction_duty_cycle=duty_cycle,
    )
    interval_s = LogSettings().compaction_interval_ms / 1000
    parent = dir if dir is not None else Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vpq-bench-compaction-", dir=parent))
    try:
        with Stages() as stages:
            result = event_loop.run(
                _run(work, settings, fill_mb * 1_000_000, batch, record_bytes, concurrency, max(1, rounds), stages),
                use_uvloop=use_uvloop,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    disk = result["disk"]
    assert isinstance(disk, dict)
    for layout, d in disk.items():
        typer.echo(
            f"disk ({layout} batches): {d['before'] / 1e6:.1f} MB -> {d['after'] / 1e6:.1f} MB"
            f" = {d['ratio']:.3f} of before (goal <= 0.20) in one pass of {d['seconds']:.2f} s"
            f" (interval {interval_s:g} s); queue 2 intact: {d['kept_records_intact']}"
        )
    with_rates = result["with"]
    without_rates = result["without"]
    assert isinstance(with_rates, list) and isinstance(without_rates, list)
    med_with, med_without = statistics.median(with_rates), statistics.median(without_rates)
    ratio = med_with / med_without if med_without else 0.0
    pairs = [w / wo for w, wo in zip(with_rates, without_rates) if wo]
    pair_ratio = statistics.median(pairs) if pairs else 0.0
    typer.echo(
        f"produce: median {med_with:,.0f} rec/s with compaction, {med_without:,.0f} without"
        f" -> ratio {ratio:.3f} (goal >= 0.8); median of the rounds' own ratios {pair_ratio:.3f}"
    )
    summary = {
        "disk": disk,
        "compaction_interval_s": interval_s,
        "with_records_per_s": [round(r) for r in with_rates],
        "without_records_per_s": [round(r) for r in without_rates],
        "median_with": round(med_with),
        "median_without": round(med_without),
        "ratio": round(ratio, 3),
        "pair_ratios": [round(r, 3) for r in pairs],
        "pair_ratio_median": round(pair_ratio, 3),
        "fill_mb": fill_mb,
        "record_bytes": record_bytes,
        "batch": batch,
        "concurrency": concurrency,
        "segment_mb": segment_mb,
        "rounds": rounds,
        "max_bytes_per_s": max_bytes_per_s,
        "duty_cycle": duty_cycle,
    }
    typer.echo(orjson.dumps(summary).decode())
