"""Child process of the crash test: appends forever from several tasks and prints
every acknowledged record as ``<offset> <value hex>`` (flushed), until killed.

Usage: python crash_child.py DIRECTORY ROUND
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from config.settings import LogSettings
from write_nodes.log import PartitionLog
from write_nodes.records import Record


async def main(directory: Path, round_: str) -> None:
    settings = LogSettings(segment_bytes=16384, index_interval_bytes=512, checkpoint_interval_ms=20)
    log = PartitionLog(directory, settings)
    await log.start()
    out = sys.stdout

    async def writer(w: int) -> None:
        seq = 0
        while True:
            records = [
                Record(value=(f"{round_}-w{w}-s{seq}-r{j}|".encode() * (1 + (seq + j) % 7)), key=f"k{w}".encode())
                for j in range(1 + seq % 3)
            ]
            base, _ = await log.append(records)
            out.write("".join(f"{base + j} {r.value.hex()}\n" for j, r in enumerate(records)))
            out.flush()
            seq += 1

    await asyncio.gather(*(writer(w) for w in range(4)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
