"""``vpq bench log``: the partition log's durable append rate against this machine's raw limit.

Phase 1 runs ``--concurrency`` appenders, each appending (magic-2) batches of ``--batch``
records of ``--record-bytes`` for ``--seconds`` to one :class:`PartitionLog`
(fsync per group commit by default), and records, per I/O round of the group
committer, how many bytes it wrote and how many fsyncs it made.

Phase 2 replays exactly that pattern with plain ``os.write`` + the same fsync
call on a file in the same directory tree (same file system, no pre-allocation
on either side): the same write sizes, in the same order, with the same number
of fsyncs. ``ratio = mb_per_s / raw_mb_per_s`` is therefore the share of the
machine's durable-write limit that the log reaches (1.0 = no overhead).

MB are 10**6 bytes of log file data (batch headers included). The last line
printed is one JSON object.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from pathlib import Path

import orjson
import typer

from vpq.cli.progress import Stages
from vpq.codec.batch_common import VALUE_RAW
from vpq.codec.records import Record
from vpq.common import event_loop
from vpq.config.settings import LogSettings
from vpq.write_nodes.group_commit import default_fsync
from vpq.write_nodes.log import PartitionLog

_HISTORY = 10_000_000  # I/O rounds remembered by the committer


def _records(seed: int, count: int, record_bytes: int) -> list[Record]:
    value = os.urandom(record_bytes)
    return [
        Record(
            value=value,
            queue_id=seed,
            virtual_partition=i % 16,
            key_hash=(seed * 2654435761 + i) & 0xFFFFFFFF,
            context_id=0,
            value_encoding=VALUE_RAW,
            key=f"key-{seed}-{i}".encode(),
        )
        for i in range(count)
    ]


async def _run(
    work: Path, settings: LogSettings, seconds: float, rounds: int, record_bytes: int, batch: int, concurrency: int
) -> dict[str, float | int]:
    """Alternate log rounds and raw replays of each round's I/O pattern, so that the
    drift of a shared or cloud disk hits both sides alike."""
    log = PartitionLog(work / "log", settings, history_size=_HISTORY)
    await log.start()
    raw_dir = work / "raw"
    raw_dir.mkdir()
    raw_fd = os.open(raw_dir / "raw.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    latencies: list[float] = []
    appended = [0]
    sources = [_records(i, batch, record_bytes) for i in range(concurrency)]
    block = memoryview(os.urandom(max(settings.max_group_bytes, batch * (record_bytes + 64) * concurrency)))
    log_elapsed = raw_elapsed = 0.0
    log_bytes = 0
    seen = 0

    async def appender(records: list[Record], stop_at: float) -> None:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await log.append(records)
            latencies.append(time.perf_counter() - t0)
            appended[0] += len(records)

    try:
        for _ in range(rounds):
            started = time.perf_counter()
            stop_at = started + seconds / rounds
            await asyncio.gather(*(appender(r, stop_at) for r in sources))
            log_elapsed += time.perf_counter() - started
            history = log.committer.history_snapshot()[seen:]
            seen += len(history)
            log_bytes += sum(n for n, _ in history)
            raw_elapsed += _replay(raw_fd, block, history)
        committer = log.committer
        fsyncs, groups = committer.fsyncs, committer.groups
    finally:
        os.close(raw_fd)
        await log.stop()
    latencies.sort()
    return {
        "log_elapsed": log_elapsed,
        "raw_elapsed": raw_elapsed,
        "bytes": log_bytes,
        "io_rounds": seen,
        "records": appended[0],
        "fsyncs": fsyncs,
        "groups": groups,
        "p50_ms": latencies[len(latencies) // 2] * 1000 if latencies else 0.0,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000 if latencies else 0.0,
    }


def _replay(fd: int, block: memoryview, history: list[tuple[int, int]]) -> float:
    """Replay (bytes written, fsyncs) rounds with os.write + the same fsync; returns seconds."""
    started = time.perf_counter()
    for nbytes, nsyncs in history:
        done = 0
        while done < nbytes:
            done += os.write(fd, block[: min(nbytes - done, len(block))])
        for _ in range(nsyncs):
            default_fsync(fd)
    return time.perf_counter() - started


def bench_log(
    seconds: float = typer.Option(5.0, help="how long the log phase appends"),
    record_bytes: int = typer.Option(1024, help="value size of each record"),
    batch: int = typer.Option(100, help="records per append (one batch)"),
    concurrency: int = typer.Option(8, help="concurrent appenders (group commit gathers them)"),
    dir: Path | None = typer.Option(None, "--dir", help="parent directory for the data (default: current directory)"),
    fsync_policy: str = typer.Option("group", help="group | interval | none"),
    segment_mb: int = typer.Option(128, help="segment size in MiB"),
    rounds: int = typer.Option(10, help="alternate this many log rounds with raw replays"),
    use_uvloop: bool = typer.Option(True, "--uvloop/--no-uvloop", help="run on uvloop when installed"),
) -> None:
    """Append rate of one partition log vs plain write+fsync of the same sizes."""
    settings = LogSettings(fsync_policy=fsync_policy, segment_bytes=segment_mb * 1024 * 1024)  # type: ignore[arg-type]
    parent = dir if dir is not None else Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="vpq-bench-log-", dir=parent))
    try:
        with Stages() as stages:  # a live line on stderr while the rounds run; figures unchanged
            stages.stage(f"{max(1, rounds)} round(s): {seconds:g} s of log appends, then the same bytes raw")
            result = event_loop.run(
                _run(work, settings, seconds, max(1, rounds), record_bytes, batch, concurrency), use_uvloop=use_uvloop
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = float(result["log_elapsed"])
    raw_elapsed = float(result["raw_elapsed"])
    total_bytes = int(result["bytes"])
    records = int(result["records"])
    groups = max(1, int(result["groups"]))
    mb_per_s = total_bytes / elapsed / 1e6
    raw_mb_per_s = total_bytes / raw_elapsed / 1e6 if raw_elapsed > 0 else float("inf")
    summary = {
        "records_per_s": round(records / elapsed, 1),
        "mb_per_s": round(mb_per_s, 2),
        "payload_mb_per_s": round(records * record_bytes / elapsed / 1e6, 2),
        "raw_mb_per_s": round(raw_mb_per_s, 2),
        "ratio": round(mb_per_s / raw_mb_per_s, 3),
        "fsyncs": int(result["fsyncs"]),
        "groups": groups,
        "avg_group_records": round(records / groups, 1),
        "avg_group_bytes": round(total_bytes / groups),
        "append_p50_ms": round(float(result["p50_ms"]), 3),
        "append_p99_ms": round(float(result["p99_ms"]), 3),
        "seconds": round(elapsed, 3),
        "raw_seconds": round(raw_elapsed, 3),
        "rounds": rounds,
        "record_bytes": record_bytes,
        "batch": batch,
        "concurrency": concurrency,
        "fsync_policy": fsync_policy,
    }
    typer.echo(f"log : {records} records, {total_bytes / 1e6:.1f} MB in {elapsed:.2f} s")
    typer.echo(f"      {summary['records_per_s']:.0f} records/s, {mb_per_s:.1f} MB/s, {summary['fsyncs']} fsyncs")
    typer.echo(
        f"      {summary['avg_group_records']:.0f} records/group, append p50 {summary['append_p50_ms']} ms,"
        f" p99 {summary['append_p99_ms']} ms"
    )
    typer.echo(
        f"raw : the same {result['io_rounds']} writes + fsyncs in {raw_elapsed:.2f} s = {raw_mb_per_s:.1f} MB/s"
        f" (interleaved with the log in {rounds} rounds)"
    )
    typer.echo(f"ratio log/raw = {summary['ratio']:.3f}")
    typer.echo(orjson.dumps(summary).decode())

