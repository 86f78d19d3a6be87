"""Body of the multi-partition append (``POST /internal/v1/append``): pure encoding, no I/O.

A body is a run of frames, each ``>I`` partition, ``>I`` length, then ``length`` bytes of
ONE record batch (``write_nodes.records.build_batch``). Frames of one partition keep their
order: the write node appends them in body order and stops that partition at its first
refused frame. The answer is JSON, one entry per frame in body order::

    {"results": [{"base_offset": b, "last_offset": l},
                 {"error": {"code": ..., "message": ..., ...}, "status": 503}, ...]}
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

FRAME_HEADER = struct.Struct(">II")
MAX_FRAMES = 4096


class FrameError(ValueError):
    """The body is not a well-formed run of frames."""


def encode_frames(items: Sequence[tuple[int, bytes]]) -> bytes:
    """``(pp, batch)`` pairs as one body, in order."""
    parts: list[bytes] = []
    pack = FRAME_HEADER.pack
    for pp, batch in items:
        if pp < 0 or pp > 0xFFFFFFFF:
            raise ValueError(f"partition {pp} out of range")
        parts.append(pack(pp, len(batch)))
        parts.append(batch)
    return b"".join(parts)


def decode_frames(body: bytes) -> list[tuple[int, bytes]]:
    """The ``(pp, batch)`` pairs of ``body``; ``FrameError`` when it is empty, truncated,
    has an empty frame or more than ``MAX_FRAMES`` frames."""
    if not body:
        raise FrameError("empty body: expected at least one frame")
    out: list[tuple[int, bytes]] = []
    pos, end = 0, len(body)
    size = FRAME_HEADER.size
    unpack = FRAME_HEADER.unpack_from
    while pos < end:
        if end - pos < size:
            raise FrameError(f"truncated frame header at byte {pos}")
        pp, length = unpack(body, pos)
        pos += size
        if length == 0:
            raise FrameError(f"empty frame for partition {pp} at byte {pos - size}")
        if end - pos < length:
            raise FrameError(f"frame for partition {pp} at byte {pos - size} needs {length} bytes, {end - pos} left")
        out.append((pp, body[pos : pos + length]))
        pos += length
        if len(out) > MAX_FRAMES:
            raise FrameError(f"more than {MAX_FRAMES} frames")
    return out


def ok_entry(base: int, last: int) -> dict[str, Any]:
    return {"base_offset": base, "last_offset": last}


def error_entry(error: dict[str, Any], status: int) -> dict[str, Any]:
    """``error`` is the ``"error"`` object of ``common.errors`` JSON."""
    return {"error": error, "status": status}
