"""File names and the recovery-point checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from vpq.write_nodes import filenames
from vpq.write_nodes.checkpoint import decode_checkpoint, encode_checkpoint, read_checkpoint, write_checkpoint


def test_segment_file_names(tmp_path: Path) -> None:
    assert filenames.log_file(tmp_path, 1234).name == "00000000000000001234.log"
    assert filenames.index_file(tmp_path, 0).name == "00000000000000000000.index"
    assert filenames.time_index_file(tmp_path, 9).name == "00000000000000000009.timeindex"
    assert filenames.checkpoint_file(tmp_path).name == "recovery-point.checkpoint"
    with pytest.raises(ValueError):
        filenames.base_name(-1)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("00000000000000001234.log", 1234),
        ("09223372036854775807.log", (1 << 63) - 1),
        ("0000000000000001234.log", None),
        ("00000000000000001234.index", None),
        ("0000000000000000123x.log", None),
        ("00000000000000001234.log.tmp", None),
    ],
)
def test_parse_base_offset(name: str, expected: int | None) -> None:
    assert filenames.parse_base_offset(name) == expected


def test_list_segment_bases(tmp_path: Path) -> None:
    for base in (30, 0, 7):
        filenames.log_file(tmp_path, base).touch()
    filenames.index_file(tmp_path, 99).touch()
    (tmp_path / "junk.log").touch()
    assert filenames.list_segment_bases(tmp_path) == [0, 7, 30]


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path) is None
    write_checkpoint(tmp_path, 42)
    assert read_checkpoint(tmp_path) == 42
    write_checkpoint(tmp_path, 1000)
    assert read_checkpoint(tmp_path) == 1000
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    "data", [b"", b"vpq-recovery-point 1\n", b"vpq-recovery-point 2\n5\n", b"vpq-recovery-point 1\n-5\n", b"\xff\n1\n"]
)
def test_malformed_checkpoint_means_trust_nothing(data: bytes) -> None:
    assert decode_checkpoint(data) is None


def test_encode_checkpoint() -> None:
    assert decode_checkpoint(encode_checkpoint(77)) == 77
    with pytest.raises(ValueError):
        encode_checkpoint(-1)
