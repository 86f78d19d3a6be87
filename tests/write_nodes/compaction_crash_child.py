"""Child process of the compaction crash test: appends records of two queues forever
(queue 1, deleted, about 90 % of the bytes; queue 2, kept) while compacting the log
back to back with a policy that drops queue 1, and prints every acknowledged record
of queue 2 as ``<offset> <value hex>`` (flushed), until killed.

Usage: python compaction_crash_child.py DIRECTORY ROUND
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from vpq.codec.records import Record
from vpq.config.settings import LogSettings
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.retention import QueuePolicy

POLICY = QueuePolicy({2: -1}, known_below=2)


async def main(directory: Path, round_: str) -> None:
    settings = LogSettings(segment_bytes=16384, index_interval_bytes=512, checkpoint_interval_ms=20, retention_ms=-1)
    log = PartitionLog(directory, settings)
    await log.start()
    out = sys.stdout

    async def writer(w: int) -> None:
        seq = 0
        while True:
            mixed = seq % 2 == 0
            records = [
                Record(value=f"{round_}-w{w}-s{seq}-r{j}|".encode() * 8, queue_id=2 if (not mixed or j == 4) else 1,
                       key=f"k{w}".encode())
                for j in range(1 if not mixed else 10)
            ]
            if not mixed:
                await log.append([Record(value=b"gone" * 200, queue_id=1) for _ in range(4)])
            base, _ = await log.append(records)
            out.write("".join(f"{base + j} {r.value.hex()}\n" for j, r in enumerate(records) if r.queue_id == 2))
            out.flush()
            seq += 1

    async def compactor() -> None:
        while True:
            await log.compact(POLICY)
            await asyncio.sleep(0.005)

    await asyncio.gather(compactor(), *(writer(w) for w in range(4)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
