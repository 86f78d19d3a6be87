"""Child process of the crash test: appends forever from several tasks and prints
every acknowledged record as ``<offset> <value hex>`` (flushed), until killed.

Usage: python crash_child.py DIRECTORY ROUND [slow]

``slow``: each fsync takes 5 ms more (a real file system behind a slow disk), and 16
writers append pre-built magic-2 batches through ``submit_checked`` (the write node's append
path): while the I/O thread is in an fsync, the writes queued behind it are not yet
written, so a kill then finds acknowledged-looking appends that only exist in memory
unless every acknowledgement waits for its write and fsync.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import BatchView, Record
from vpq.config.settings import LogSettings
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.storage import OsStorage


class SlowFsyncStorage(OsStorage):
    def fdatasync(self, fd: int) -> None:
        time.sleep(0.005)
        super().fdatasync(fd)


async def main(directory: Path, round_: str, slow: bool) -> None:
    settings = LogSettings(segment_bytes=16384, index_interval_bytes=512, checkpoint_interval_ms=20)
    log = PartitionLog(directory, settings, storage=SlowFsyncStorage() if slow else OsStorage())
    await log.start()
    out = sys.stdout

    async def append(records: list[Record]) -> int:
        if not slow:
            return (await log.append(records))[0]
        ts = int(time.time() * 1000)
        batch = build_columnar_batch(0, ts, columns_of(records, ts))
        return (await log.submit_checked(batch, BatchView(batch, 0)))[0]

    async def writer(w: int) -> None:
        seq = 0
        while True:
            records = [
                Record(value=(f"{round_}-w{w}-s{seq}-r{j}|".encode() * (1 + (seq + j) % 7)), key=f"k{w}".encode())
                for j in range(1 + seq % 3)
            ]
            base = await append(records)
            out.write("".join(f"{base + j} {r.value.hex()}\n" for j, r in enumerate(records)))
            out.flush()
            seq += 1

    await asyncio.gather(*(writer(w) for w in range(16 if slow else 4)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:] == ["slow"]))
