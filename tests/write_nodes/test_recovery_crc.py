"""Recovery's CRC check: damage that leaves every header sane and every length in
place is found by the CRC alone, and the log ends right before the damaged batch."""

from __future__ import annotations

import struct
from pathlib import Path

from tests.write_nodes.helpers import make_records, read_all, small_settings
from vpq.codec.records import CRC_START, Record, iter_batches
from vpq.write_nodes import filenames
from vpq.write_nodes.log import PartitionLog


async def _log_of(directory: Path, batches: int) -> list[Record]:
    log = PartitionLog(directory, small_settings(segment_bytes=1 << 20))
    await log.start()
    for i in range(batches):
        await log.append(make_records(f"c{i}", 3, size=60))
    records = read_all(log)
    await log.stop()
    filenames.checkpoint_file(directory).unlink()  # recovery checks every batch
    return records


async def _reopen(directory: Path) -> tuple[list[Record], str | None, int]:
    log = PartitionLog(directory, small_settings(segment_bytes=1 << 20))
    report = await log.start()
    records = read_all(log)
    await log.stop()
    return records, report.problem, report.bytes_truncated


async def test_a_flipped_value_byte_is_a_crc_mismatch(tmp_path: Path) -> None:
    records = await _log_of(tmp_path, 6)
    path = filenames.log_file(tmp_path, 0)
    data = bytearray(path.read_bytes())
    views = list(iter_batches(bytes(data), verify=True))
    damaged = views[3]
    value_pos = bytes(data).index(records[damaged.base_offset + 1].value, damaged.pos)
    data[value_pos + 5] ^= 0x01  # one bit of one value: header, lengths and varints intact
    path.write_bytes(bytes(data))
    got, problem, truncated = await _reopen(tmp_path)
    assert problem is not None and problem.endswith("CRC mismatch")
    assert got == records[: damaged.base_offset]
    assert truncated == len(data) - damaged.pos


async def test_a_zeroed_tail_of_the_right_length_is_a_crc_mismatch(tmp_path: Path) -> None:
    """A power loss can keep a batch's header and the file length but not its last
    page: the bytes read back as zeros."""
    records = await _log_of(tmp_path, 5)
    path = filenames.log_file(tmp_path, 0)
    data = bytearray(path.read_bytes())
    last = list(iter_batches(bytes(data), verify=True))[-1]
    half = last.pos + last.size // 2
    data[half : last.pos + last.size] = bytes(last.pos + last.size - half)
    path.write_bytes(bytes(data))
    got, problem, _ = await _reopen(tmp_path)
    assert problem is not None and problem.endswith("CRC mismatch")
    assert got == records[: last.base_offset]


async def test_a_wrong_crc_field_on_intact_data_is_refused(tmp_path: Path) -> None:
    records = await _log_of(tmp_path, 4)
    path = filenames.log_file(tmp_path, 0)
    data = bytearray(path.read_bytes())
    second = list(iter_batches(bytes(data), verify=True))[1]
    crc_field = second.pos + CRC_START - 4
    (crc,) = struct.unpack_from(">I", data, crc_field)
    struct.pack_into(">I", data, crc_field, crc ^ 0x8000_0000)
    path.write_bytes(bytes(data))
    got, problem, _ = await _reopen(tmp_path)
    assert problem is not None and problem.endswith("CRC mismatch")
    assert got == records[: second.base_offset]
