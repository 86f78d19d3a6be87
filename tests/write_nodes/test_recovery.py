"""Recovery: torn tails and flipped bytes are cut off; everything before the damage stays."""

from __future__ import annotations

import asyncio
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.write_nodes.helpers import make_records, read_all, small_settings
from vpq.codec.records import Record, iter_batches
from vpq.write_nodes import filenames
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.recovery import RecoveryReport


@dataclass(frozen=True)
class Span:
    """Where one batch lives on disk."""

    segment: int
    position: int
    size: int
    base_offset: int
    next_offset: int


async def _build(directory: Path) -> list[Record]:
    log = PartitionLog(directory, small_settings())
    await log.start()
    rng = random.Random(11)
    for i in range(70):
        await log.append(make_records(f"r{i}", rng.randint(1, 4), size=rng.randint(5, 90)))
    records = read_all(log)
    await log.stop()
    return records


def _spans(directory: Path) -> list[Span]:
    spans = []
    for base in filenames.list_segment_bases(directory):
        data = filenames.log_file(directory, base).read_bytes()
        for view in iter_batches(data, verify=True):
            spans.append(Span(base, view.pos, view.size, view.base_offset, view.next_offset))
    return spans


def _open_and_read(directory: Path) -> tuple[list[Record], RecoveryReport, int]:
    async def go() -> tuple[list[Record], RecoveryReport, int]:
        log = PartitionLog(directory, small_settings())
        report = await log.start()
        records = read_all(log)
        end = log.end_offset
        # the repaired log keeps working: append, read back, reopen
        extra = make_records("extra", 2)
        assert await log.append(extra) == (end, end + 1)
        assert [r.value for r in read_all(log, end)] == [r.value for r in extra]
        await log.stop()
        return records, report, end

    return asyncio.run(go())


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Record], list[Span]]:
    directory = tmp_path_factory.mktemp("pristine")
    records = asyncio.run(_build(directory))
    spans = _spans(directory)
    assert len({s.segment for s in spans}) > 3
    return directory, records, spans


def _trial_dir(tmp_path: Path, pristine_dir: Path, trial: int) -> Path:
    target = tmp_path / f"trial-{trial}"
    shutil.copytree(pristine_dir, target)
    return target


def test_clean_reopen_checks_only_the_last_segment(pristine: tuple[Path, list[Record], list[Span]], tmp_path: Path) -> None:
    directory, records, spans = pristine
    trial = _trial_dir(tmp_path, directory, 0)
    got, report, end = _open_and_read(trial)
    assert got == records and end == len(records)
    segments = sorted({s.segment for s in spans})
    assert report.segments_trusted == len(segments) - 1
    assert report.segments_checked == 1
    assert report.batches_checked == sum(1 for s in spans if s.segment == segments[-1])
    assert report.bytes_truncated == 0 and report.problem is None


def test_truncation_at_random_points(pristine: tuple[Path, list[Record], list[Span]], tmp_path: Path) -> None:
    directory, records, spans = pristine
    segments = sorted({s.segment for s in spans})
    sizes = {seg: filenames.log_file(directory, seg).stat().st_size for seg in segments}
    rng = random.Random(2024)
    for trial in range(30):
        target = _trial_dir(tmp_path, directory, trial)
        keep_checkpoint = trial % 3 == 0
        if keep_checkpoint:
            segment = segments[-1]  # the checkpoint trusts the others
        else:
            filenames.checkpoint_file(target).unlink()
            segment = rng.choice(segments)
        cut = rng.randrange(sizes[segment] + 1)
        with open(filenames.log_file(target, segment), "r+b") as f:
            f.truncate(cut)
        kept = [s for s in spans if s.segment < segment or (s.segment == segment and s.position + s.size <= cut)]
        valid_end = max((s.position + s.size for s in kept if s.segment == segment), default=0)
        expected_end = kept[-1].next_offset if kept else 0
        got, report, end = _open_and_read(target)
        assert end == expected_end, (trial, segment, cut)
        assert got == records[:expected_end]
        later = sum(size for seg, size in sizes.items() if seg > segment)
        assert report.bytes_truncated == cut - valid_end + later
        shutil.rmtree(target)


def test_flipped_bytes_are_never_served(pristine: tuple[Path, list[Record], list[Span]], tmp_path: Path) -> None:
    directory, records, spans = pristine
    rng = random.Random(99)
    for trial in range(30):
        target = _trial_dir(tmp_path, directory, trial)
        filenames.checkpoint_file(target).unlink()  # make recovery check every segment
        damaged = rng.choice(spans)
        pos = damaged.position + rng.randrange(damaged.size)
        path = filenames.log_file(target, damaged.segment)
        data = bytearray(path.read_bytes())
        data[pos] ^= rng.randrange(1, 256)
        path.write_bytes(bytes(data))
        got, report, end = _open_and_read(target)
        assert end == damaged.base_offset, (trial, damaged, pos)
        assert got == records[: damaged.base_offset]
        assert report.problem is not None
        shutil.rmtree(target)


def test_leftover_temporary_and_orphan_files_are_removed(
    pristine: tuple[Path, list[Record], list[Span]], tmp_path: Path
) -> None:
    directory, records, _ = pristine
    target = _trial_dir(tmp_path, directory, 0)
    (target / "recovery-point.checkpoint.tmp").write_bytes(b"junk")
    filenames.index_file(target, 10**9).write_bytes(b"junk")
    got, _, _ = _open_and_read(target)
    assert got == records
    assert not list(target.glob("*.tmp"))
    assert not filenames.index_file(target, 10**9).exists()


def test_empty_directory_starts_at_zero(tmp_path: Path) -> None:
    got, report, end = _open_and_read(tmp_path / "new")
    assert got == [] and end == 0
    assert report.recovered_end_offset == 0 and report.segments_checked == 0
