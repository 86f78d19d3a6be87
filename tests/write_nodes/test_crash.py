"""kill -9 in the middle of appending: every acknowledged record survives, CRC-valid."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.write_nodes.helpers import read_all
from vpq.config.settings import LogSettings
from vpq.write_nodes.log import PartitionLog

CHILD = Path(__file__).with_name("crash_child.py")
REPO = Path(__file__).resolve().parents[2]


def _run_and_kill(directory: Path, round_: str, min_acks: int, *mode: str) -> dict[int, bytes]:
    """Start the child (``mode``: its optional ``slow``), let it acknowledge ``min_acks``
    records, SIGKILL it mid-stream, and return every acknowledged (offset -> value) it
    printed."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(directory), round_, *mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=REPO,
        env=env,
    )
    acked: dict[int, bytes] = {}
    assert child.stdout is not None
    try:
        for line in child.stdout:
            offset, value = line.split()
            acked[int(offset)] = bytes.fromhex(value.decode())
            if len(acked) >= min_acks:
                os.kill(child.pid, signal.SIGKILL)
                break
        # lines already printed before the kill were acknowledged too
        for line in child.stdout:
            if line.endswith(b"\n"):
                offset, value = line.split()
                acked[int(offset)] = bytes.fromhex(value.decode())
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)
        stderr = child.stderr.read().decode() if child.stderr else ""
    assert child.returncode == -signal.SIGKILL, stderr
    assert len(acked) >= min_acks, stderr
    return acked


def _verify(directory: Path, acked: dict[int, bytes]) -> None:
    """Reopen (recovery) and check every acknowledged record is there, CRC-valid."""

    async def verify() -> None:
        log = PartitionLog(directory, LogSettings(segment_bytes=16384, index_interval_bytes=512))
        report = await log.start()
        records = {r.offset: r.value for r in read_all(log)}  # read_all checks every CRC
        assert log.end_offset >= max(acked) + 1
        missing = [o for o in acked if o not in records]
        assert not missing, (len(missing), missing[:10], report)
        wrong = [o for o, v in acked.items() if records[o] != v]
        assert not wrong, wrong[:10]
        assert log.segment_count > 1
        await log.stop()

    asyncio.run(verify())


def _rounds(directory: Path, min_acks: int, *mode: str) -> dict[int, bytes]:
    acked: dict[int, bytes] = {}
    for round_ in ("one", "two", "three"):
        fresh = _run_and_kill(directory, round_, min_acks, *mode)
        assert not set(fresh) & set(acked), "offsets are never reused for acknowledged data"
        acked.update(fresh)
    return acked


def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    _verify(tmp_path, _rounds(tmp_path, 400))


def test_acknowledged_appends_survive_sigkill_with_writes_queued_behind_a_slow_fsync(tmp_path: Path) -> None:
    """Killed while 16 appends are in flight and the I/O thread is inside a 5 ms fsync:
    only what was acknowledged must be there (see ``crash_child.py``)."""
    _verify(tmp_path, _rounds(tmp_path, 300, "slow"))


COMPACTION_CHILD = Path(__file__).with_name("compaction_crash_child.py")


def test_kill_during_compaction_loses_no_acknowledged_record(tmp_path: Path) -> None:
    """A child appends two queues and compacts one away back to back; SIGKILL at
    several points: every acknowledged record of the kept queue is still at its
    offset, the compacted segments recover with their gaps, and compaction did run."""
    from tests.write_nodes.test_compaction import read_everything

    acked: dict[int, bytes] = {}
    for round_, min_acks in (("one", 400), ("two", 900), ("three", 1500), ("four", 700)):
        env = dict(os.environ, PYTHONPATH=str(REPO))
        child = subprocess.Popen(
            [sys.executable, str(COMPACTION_CHILD), str(tmp_path), round_],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=env,
        )
        fresh: dict[int, bytes] = {}
        assert child.stdout is not None
        try:
            for line in child.stdout:
                offset, value = line.split()
                fresh[int(offset)] = bytes.fromhex(value.decode())
                if len(fresh) >= min_acks:
                    os.kill(child.pid, signal.SIGKILL)
                    break
            for line in child.stdout:
                if line.endswith(b"\n"):
                    offset, value = line.split()
                    fresh[int(offset)] = bytes.fromhex(value.decode())
        finally:
            if child.poll() is None:
                child.kill()
            child.wait(timeout=30)
            stderr = child.stderr.read().decode() if child.stderr else ""
        assert child.returncode == -signal.SIGKILL, stderr
        assert not set(fresh) & set(acked)
        acked.update(fresh)

        async def verify() -> int:
            log = PartitionLog(tmp_path, LogSettings(segment_bytes=16384, index_interval_bytes=512))
            await log.start()
            records = {r.offset: r.value for r in read_everything(log)}
            missing = [o for o in acked if records.get(o) != acked[o]]
            assert not missing, (round_, len(missing), missing[:10])
            compacted = len(list(tmp_path.glob("*.compacted")))
            await log.stop()
            return compacted

        assert asyncio.run(verify()) > 0, "compaction never ran"
