"""Body of the multi-partition append (``POST /internal/v1/append``): pure encoding, no I/O.

A body is a run of frames, each ``>I`` partition word, ``>I`` length, then ``length`` bytes
of ONE magic-2 record batch (``codec.columnar.build_columnar_batch``). Bit 30 of the
partition word is ``LEADER_EPOCH``: a ``>I`` leader epoch follows the length (before the
batch), the epoch at which the sender believes the node leads the (replicated) partition;
the node refuses the frame (503 ``stale_leader_epoch``) when it leads at another one.
Bit 31 of the partition word is ``CONTINUES``: the frame continues the chain of the previous frame of the same partition
in this body (the next chunk of one producer's batch, too big for one frame); a frame
without it starts a chain of its own. The write node appends frames in body order and
refuses every later frame of a chain once one of its frames was refused, so a chain
never lands out of order; chains are independent of each other (one body may carry
the frames of several producers). The answer is JSON, one entry per frame in body order::

    {"results": [{"base_offset": b, "last_offset": l},
                 {"offsets": [o0, o1, ...], "vps": [v0, v1, ...]},
                 {"error": {"code": ..., "message": ..., ...}, "status": 503}, ...]}

The second form answers a frame some of whose records were duplicates (a ``dedup_id``
already stored, ``write_nodes.dedup``): one offset and one vp per record of the frame,
in order, a duplicate's being its stored copy's; only the other records were appended.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any, NamedTuple

FRAME_HEADER = struct.Struct(">II")
EPOCH_WORD = struct.Struct(">I")
CONTINUES = 0x8000_0000
LEADER_EPOCH = 0x4000_0000
MAX_PARTITION = LEADER_EPOCH - 1
MAX_EPOCH = 0xFFFF_FFFF
MAX_FRAMES = 4096
STALE_LEADER_EPOCH = "stale_leader_epoch"


class FrameError(ValueError):
    """The body is not a well-formed run of frames."""


class Frame(NamedTuple):
    """One batch for partition ``pp`` (``bytes``, or a ``bytearray`` on the sending side);
    ``continues``, ``leader_epoch`` (-1: none): see the module docstring."""

    pp: int
    batch: bytes | bytearray
    continues: bool = False
    leader_epoch: int = -1


def encode_frames(frames: Sequence[Frame]) -> bytes:
    """``frames`` as one body, in order."""
    return b"".join(frame_buffers(frames))


def frame_buffers(frames: Sequence[Frame]) -> list[bytes | bytearray]:
    """The body of ``frames`` as buffers to send in order (``encode_frames`` joined): the
    batches themselves, not copies."""
    parts: list[bytes | bytearray] = []
    pack = FRAME_HEADER.pack
    for pp, batch, continues, epoch in frames:
        if pp < 0 or pp > MAX_PARTITION:
            raise ValueError(f"partition {pp} out of range")
        word = pp | CONTINUES if continues else pp
        if epoch < -1 or epoch > MAX_EPOCH:
            raise ValueError(f"leader epoch {epoch} out of range")
        if epoch >= 0:
            parts.append(pack(word | LEADER_EPOCH, len(batch)))
            parts.append(EPOCH_WORD.pack(epoch))
        else:
            parts.append(pack(word, len(batch)))
        parts.append(batch)
    return parts


def decode_frames(body: bytes) -> list[Frame]:
    """The frames of ``body``; ``FrameError`` when it is empty, truncated, has an empty
    frame or more than ``MAX_FRAMES`` frames."""
    if not body:
        raise FrameError("empty body: expected at least one frame")
    out: list[Frame] = []
    pos, end = 0, len(body)
    size = FRAME_HEADER.size
    unpack = FRAME_HEADER.unpack_from
    while pos < end:
        if end - pos < size:
            raise FrameError(f"truncated frame header at byte {pos}")
        word, length = unpack(body, pos)
        pp = word & MAX_PARTITION
        pos += size
        epoch = -1
        if word & LEADER_EPOCH:
            if end - pos < EPOCH_WORD.size:
                raise FrameError(f"truncated leader epoch of the frame at byte {pos - size}")
            (epoch,) = EPOCH_WORD.unpack_from(body, pos)
            pos += EPOCH_WORD.size
        if length == 0:
            raise FrameError(f"empty frame for partition {pp} at byte {pos - size}")
        if end - pos < length:
            raise FrameError(f"frame for partition {pp} at byte {pos - size} needs {length} bytes, {end - pos} left")
        out.append(Frame(pp, body[pos : pos + length], bool(word & CONTINUES), epoch))
        pos += length
        if len(out) > MAX_FRAMES:
            raise FrameError(f"more than {MAX_FRAMES} frames")
    return out


class ChainGate:
    """The node's rule for chains, as a small pure object: ``refused(frame)`` is the error
    an earlier frame of its chain got (the frame must then be refused with it), ``None``
    when it may be tried; ``record(frame, error)`` after trying it."""

    def __init__(self) -> None:
        self._last: dict[int, Any] = {}  # pp -> error of its current chain, or None

    def refused(self, frame: Frame) -> Any:
        if not frame.continues:
            self._last[frame.pp] = None
            return None
        return self._last.get(frame.pp)

    def record(self, frame: Frame, error: Any) -> None:
        if error is not None:
            self._last[frame.pp] = error


class Deduplicated(NamedTuple):
    """The answer for records some of which were duplicates: each record's offset and
    vp, in order (see the module docstring)."""

    offsets: list[int]
    vps: list[int]

    def part(self, start: int, count: int) -> Deduplicated:
        """The answer for records ``start .. start + count - 1``."""
        if start == 0 and count == len(self.offsets):
            return self
        return Deduplicated(self.offsets[start : start + count], self.vps[start : start + count])


def dedup_entry(answer: Deduplicated) -> dict[str, Any]:
    return {"offsets": answer.offsets, "vps": answer.vps}


def ok_entry(base: int, last: int) -> dict[str, Any]:
    return {"base_offset": base, "last_offset": last}


def error_entry(error: dict[str, Any], status: int) -> dict[str, Any]:
    """``error`` is the ``"error"`` object of ``common.errors`` JSON."""
    return {"error": error, "status": status}
