"""Persistable ack state of one consumer group on one queue, per physical partition.

What must survive a read-node failover is *which offsets of this queue are done*
(acked, or dead-lettered and safely produced to the DLQ). Per pp it is kept as:

- ``scanned_to``: the reader has handed every record of this queue at offsets
  ``< scanned_to`` to the delivery state (the service advances it with
  ``mark_scanned`` only after ingesting; offsets of other queues in the pp do not
  matter, which is what lets a small queue in a busy pp persist a tiny state);
- ``pending_below``: the offsets ``< scanned_to`` that are NOT done (in flight,
  waiting, blocked behind their key, or dead-lettered but not yet confirmed);
- ``acked_above``: done offsets ``>= scanned_to`` (records ingested ahead of the
  scan position, e.g. while an earlier vp range of the lineage is held back).

So an offset ``o`` of this queue is done iff ``o < scanned_to and o not in
pending_below`` or ``o in acked_above``. ``low_watermark`` (every offset of this
queue below it is done) is ``min(pending_below[0], scanned_to)``; the service
re-tails from there after a takeover. The state is bounded by the number of
outstanding messages (plus a short ``acked_above``), not by how many messages
were acked while an old one is stuck (e.g. a message of an env without
consumers), which a plain ``(low_watermark, acked offsets above it)`` pair is.
``PartitionAckState.from_pair(low_watermark, acked_above)`` reads that simpler
form too.

Pure logic: no I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sortedcontainers import SortedList


def _offset(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} must be an integer >= 0, got {value!r}")
    return value


def _strictly_increasing(values: Iterable[object], what: str) -> tuple[int, ...]:
    out = tuple(_offset(v, what) for v in values)
    for a, b in zip(out, out[1:]):
        if b <= a:
            raise ValueError(f"{what} must be strictly increasing, got {a} then {b}")
    return out


@dataclass(frozen=True, slots=True)
class PartitionAckState:
    """The done/not-done state of one queue's offsets in one pp (see module docstring)."""

    scanned_to: int
    pending_below: tuple[int, ...] = ()
    acked_above: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _offset(self.scanned_to, "scanned_to")
        pending = _strictly_increasing(self.pending_below, "pending_below")
        acked = _strictly_increasing(self.acked_above, "acked_above")
        if pending and pending[-1] >= self.scanned_to:
            raise ValueError(f"pending_below offset {pending[-1]} is not below scanned_to {self.scanned_to}")
        if acked and acked[0] < self.scanned_to:
            raise ValueError(f"acked_above offset {acked[0]} is below scanned_to {self.scanned_to}")
        object.__setattr__(self, "pending_below", pending)
        object.__setattr__(self, "acked_above", acked)

    @property
    def low_watermark(self) -> int:
        """Every offset of the queue below this one is done."""
        return self.pending_below[0] if self.pending_below else self.scanned_to

    def is_done(self, offset: int) -> bool:
        """True when the record of this queue at ``offset`` is acked or dead-lettered."""
        if offset < self.scanned_to:
            return not _contains(self.pending_below, offset)
        return _contains(self.acked_above, offset)

    @classmethod
    def from_pair(cls, low_watermark: int, acked_above: Iterable[int] = ()) -> PartitionAckState:
        """The state "everything below ``low_watermark`` is done, plus ``acked_above``"."""
        return cls(low_watermark, (), tuple(acked_above))

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict; ``from_json`` is its inverse."""
        return {"scanned_to": self.scanned_to, "pending_below": list(self.pending_below), "acked_above": list(self.acked_above)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionAckState:
        """Inverse of ``to_json``; ValueError on malformed input."""
        try:
            return cls(data["scanned_to"], tuple(data.get("pending_below", ())), tuple(data.get("acked_above", ())))
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"malformed ack state: {e!r}") from None


def _contains(sorted_values: tuple[int, ...], value: int) -> bool:
    i = bisect_left(sorted_values, value)
    return i < len(sorted_values) and sorted_values[i] == value


AckStateLike = PartitionAckState | tuple[int, Iterable[int]]


class _Partition:
    __slots__ = ("scanned", "unfinished", "acked")

    def __init__(self, scanned: int = 0) -> None:
        self.scanned = scanned
        self.unfinished: SortedList = SortedList()
        self.acked: SortedList = SortedList()


class AckTracker:
    """Tracks, per pp, the offsets of one queue that are not done yet.

    ``track`` an offset when its message is ingested, ``done`` it when acked or
    dead-lettered-and-confirmed; ``mark_scanned`` after the reader has ingested
    everything of the queue below a position. All operations O(log n).
    """

    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: dict[int, _Partition] = {}

    def _part(self, pp: int) -> _Partition:
        part = self._parts.get(pp)
        if part is None:
            _offset(pp, "pp")
            part = self._parts[pp] = _Partition()
        return part

    def restore(self, states: Mapping[int, AckStateLike]) -> None:
        """Load persisted states (``PartitionAckState`` or ``(low_watermark, acked_above)``).
        Only on an empty tracker; ValueError otherwise or on malformed input."""
        if any(p.unfinished or p.acked or p.scanned for p in self._parts.values()):
            raise ValueError("restore needs an empty ack tracker")
        parsed: dict[int, PartitionAckState] = {}
        for pp, st in states.items():
            _offset(pp, "pp")
            if not isinstance(st, PartitionAckState):
                if not isinstance(st, (tuple, list)) or len(st) != 2:
                    raise ValueError(f"ack state of pp {pp} must be PartitionAckState or (low_watermark, acked_above)")
                st = PartitionAckState.from_pair(st[0], st[1])
            parsed[pp] = st
        self._parts.clear()
        for pp, st in parsed.items():
            part = self._parts[pp] = _Partition(st.scanned_to)
            part.unfinished.update(st.pending_below)
            part.acked.update(st.acked_above)

    def is_done(self, pp: int, offset: int) -> bool:
        """True when ``offset`` of ``pp`` is known to be done (ingest must skip it)."""
        part = self._parts.get(pp)
        if part is None:
            return False
        if offset < part.scanned:
            return offset not in part.unfinished
        return offset in part.acked

    def is_tracked(self, pp: int, offset: int) -> bool:
        """True when ``offset`` is tracked as not done (ingested, or pending from a restore)."""
        part = self._parts.get(pp)
        return part is not None and offset in part.unfinished

    def track(self, pp: int, offset: int) -> None:
        """Record that the message at ``offset`` is outstanding (idempotent)."""
        _offset(offset, "offset")
        part = self._part(pp)
        if offset in part.acked:
            raise ValueError(f"offset {offset} of pp {pp} is already done")
        if offset not in part.unfinished:
            part.unfinished.add(offset)

    def done(self, pp: int, offset: int) -> None:
        """Record that the message at ``offset`` is acked or dead-lettered for good."""
        part = self._part(pp)
        part.unfinished.discard(offset)
        if offset >= part.scanned and offset not in part.acked:
            part.acked.add(offset)

    def mark_scanned(self, pp: int, offset: int) -> None:
        """Every record of the queue in ``pp`` below ``offset`` has been ingested (or
        skipped as done). Never moves back; smaller values are ignored."""
        _offset(offset, "offset")
        part = self._part(pp)
        if offset <= part.scanned:
            return
        part.scanned = offset
        acked = part.acked
        if acked and acked[0] < offset:
            del acked[: acked.bisect_left(offset)]

    def scanned_to(self, pp: int) -> int:
        part = self._parts.get(pp)
        return 0 if part is None else part.scanned

    def low_watermark(self, pp: int) -> int:
        part = self._parts.get(pp)
        if part is None:
            return 0
        return min(part.unfinished[0], part.scanned) if part.unfinished else part.scanned

    def outstanding(self) -> int:
        """Offsets tracked as not done, over all pps."""
        return sum(len(p.unfinished) for p in self._parts.values())

    def state(self) -> dict[int, PartitionAckState]:
        """The persistable state of every pp seen. O(outstanding + acked_above)."""
        out: dict[int, PartitionAckState] = {}
        for pp, part in self._parts.items():
            below = tuple(part.unfinished.irange(maximum=part.scanned, inclusive=(True, False)))
            above = tuple(part.acked)
            out[pp] = PartitionAckState(part.scanned, below, above)
        return out

    def pps(self) -> list[int]:
        return sorted(self._parts)
