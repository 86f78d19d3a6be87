"""The one place that knows the file names of a partition directory.

A segment is named by its base offset, zero padded to 20 digits (every int64
fits), with one suffix per file::

    00000000000000001234.log         record batches
    00000000000000001234.index       sparse offset index (rebuildable cache)
    00000000000000001234.timeindex   sparse time index (rebuildable cache)
    00000000000000001234.compacted   end offset of a compacted segment (its offsets have gaps)
    recovery-point.checkpoint        offsets below this were fsynced, with their indexes

Temporary files end in ``.tmp`` and are ignored (and removed) when a log opens.
"""

from __future__ import annotations

from pathlib import Path

from vpq.write_nodes.storage import OS_STORAGE, Storage

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
COMPACTED_SUFFIX = ".compacted"
TMP_SUFFIX = ".tmp"
CHECKPOINT_NAME = "recovery-point.checkpoint"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
_DIGITS = 20


def base_name(base_offset: int) -> str:
    if base_offset < 0:
        raise ValueError(f"negative base offset {base_offset}")
    return f"{base_offset:0{_DIGITS}d}"


def log_file(directory: Path, base_offset: int) -> Path:
    return directory / (base_name(base_offset) + LOG_SUFFIX)


def index_file(directory: Path, base_offset: int) -> Path:
    return directory / (base_name(base_offset) + INDEX_SUFFIX)


def time_index_file(directory: Path, base_offset: int) -> Path:
    return directory / (base_name(base_offset) + TIME_INDEX_SUFFIX)


def compacted_file(directory: Path, base_offset: int) -> Path:
    return directory / (base_name(base_offset) + COMPACTED_SUFFIX)


def checkpoint_file(directory: Path) -> Path:
    return directory / CHECKPOINT_NAME


def tmp_file(path: Path) -> Path:
    return path.with_name(path.name + TMP_SUFFIX)


def parse_base_offset(name: str, suffix: str = LOG_SUFFIX) -> int | None:
    """The base offset encoded in a file name with ``suffix``, or ``None`` when the
    name is not exactly ``<20 digits><suffix>``."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != _DIGITS or not stem.isascii() or not stem.isdigit():
        return None
    return int(stem)


def list_segment_bases(directory: Path, storage: Storage = OS_STORAGE) -> list[int]:
    """Base offsets of the ``.log`` files in ``directory``, ascending."""
    bases = []
    for name in storage.listdir(directory):
        base = parse_base_offset(name)
        if base is not None:
            bases.append(base)
    return sorted(bases)


def list_tmp_files(directory: Path, storage: Storage = OS_STORAGE) -> list[Path]:
    return sorted(directory / name for name in storage.listdir(directory) if name.endswith(TMP_SUFFIX))
