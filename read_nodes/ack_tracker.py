"""Persistable ack state of one consumer group on one queue, per physical partition.

What must survive a read-node failover is *which offsets of this queue are done*
(acked, or dead-lettered and safely produced to the DLQ). Two forms are offered;
a group must be persisted and restored with one form consistently.

**Pair form** ``(low_watermark, acked_above)`` (what ``metadata.acks`` stores):
every offset of the queue below ``low_watermark`` is done (offsets of other
queues in the shared pp do not matter), plus the done offsets at or above it.
The watermark never goes backwards. Its size is the number of done offsets
above the oldest outstanding one, so one stuck message (e.g. of an env without
consumers) makes it grow with every later ack; ``window`` lets the caller stop
ingesting a pp before it exceeds a bound.

**Compact form** ``PartitionAckState(scanned_to, pending_below, acked_above)``:

- ``scanned_to``: the reader has handed every record of this queue at offsets
  ``< scanned_to`` to the delivery state (``mark_scanned``, only after ingesting);
- ``pending_below``: the offsets ``< scanned_to`` that are NOT done;
- ``acked_above``: done offsets ``>= scanned_to`` (ingested ahead of the scan
  position, e.g. while an earlier vp range of the lineage is held back).

Its size is bounded by the outstanding messages, whatever is stuck.
``low_watermark`` is ``min(pending_below[0], scanned_to)`` in both forms, and
``PartitionAckState.from_pair`` reads a pair.

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

    @classmethod
    def trusted(cls, scanned_to: int, pending_below: tuple[int, ...], acked_above: tuple[int, ...]) -> PartitionAckState:
        """Build without re-validating: for states derived from an ``AckTracker``, whose
        sorted sets already guarantee the invariants (validating costs O(n) per save,
        which stalled the event loop for milliseconds on every persist of a big backlog)."""
        obj = object.__new__(cls)
        object.__setattr__(obj, "scanned_to", scanned_to)
        object.__setattr__(obj, "pending_below", pending_below)
        object.__setattr__(obj, "acked_above", acked_above)
        return obj

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
        """The state "everything below ``low_watermark`` is done, plus ``acked_above``"
        (offsets below ``low_watermark`` in ``acked_above`` are ignored)."""
        return cls(low_watermark, (), tuple(o for o in acked_above if o >= low_watermark))

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


AckStateLike = Any
"""A ``PartitionAckState``, a ``(low_watermark, acked_above)`` pair, or any object
with ``low_watermark`` and ``acked_above`` attributes (``metadata.acks.AckState``)."""


def as_partition_state(state: AckStateLike) -> PartitionAckState:
    """Normalize any accepted form to a ``PartitionAckState``; ValueError otherwise."""
    if isinstance(state, PartitionAckState):
        return state
    if isinstance(state, (tuple, list)):
        if len(state) != 2:
            raise ValueError("an ack state pair must be (low_watermark, acked_above)")
        return PartitionAckState.from_pair(state[0], sorted(set(state[1])))
    lw = getattr(state, "low_watermark", None)
    above = getattr(state, "acked_above", None)
    if lw is None or above is None:
        raise ValueError(f"not an ack state: {state!r}")
    return PartitionAckState.from_pair(lw, sorted(set(above)))


class _Partition:
    __slots__ = ("scanned", "unfinished", "done", "unlisted_below")

    def __init__(self, scanned: int = 0) -> None:
        self.scanned = scanned
        self.unfinished: SortedList = SortedList()  # outstanding offsets (ingested or restored pending)
        self.done: SortedList = SortedList()  # done offsets >= the low watermark
        # after restoring a compact state with pending offsets, the done offsets between
        # them and its scanned_to are not listed: the pair form is exact only once the
        # watermark has passed that point
        self.unlisted_below = 0

    def low_watermark(self) -> int:
        return min(self.unfinished[0], self.scanned) if self.unfinished else self.scanned

    def trim(self) -> None:
        done = self.done
        if done:
            lw = self.low_watermark()
            if done[0] < lw:
                del done[: done.bisect_left(lw)]


class AckTracker:
    """Tracks, per pp, the offsets of one queue that are not done yet.

    ``track`` an offset when its message is ingested, ``done`` it when acked or
    dead-lettered-and-confirmed; ``mark_scanned`` after the reader has ingested
    everything of the queue below a position. All operations O(log n) amortized.
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
        """Load persisted states (see ``AckStateLike``). Only on an empty tracker;
        ValueError otherwise or on malformed input (then nothing changes)."""
        if any(p.unfinished or p.done or p.scanned for p in self._parts.values()):
            raise ValueError("restore needs an empty ack tracker")
        parsed: dict[int, PartitionAckState] = {}
        for pp, st in states.items():
            _offset(pp, "pp")
            parsed[pp] = as_partition_state(st)
        self._parts.clear()
        for pp, st in parsed.items():
            part = self._parts[pp] = _Partition(st.scanned_to)
            part.unfinished.update(st.pending_below)
            part.done.update(st.acked_above)
            part.unlisted_below = st.scanned_to if st.pending_below else 0

    def is_done(self, pp: int, offset: int) -> bool:
        """True when ``offset`` of ``pp`` is known to be done (ingest must skip it)."""
        part = self._parts.get(pp)
        if part is None:
            return False
        if offset < part.scanned:
            return offset not in part.unfinished
        return offset in part.done

    def is_tracked(self, pp: int, offset: int) -> bool:
        """True when ``offset`` is tracked as not done (ingested, or pending from a restore)."""
        part = self._parts.get(pp)
        return part is not None and offset in part.unfinished

    def track(self, pp: int, offset: int) -> None:
        """Record that the message at ``offset`` is outstanding (idempotent)."""
        _offset(offset, "offset")
        part = self._part(pp)
        if offset in part.done or (offset < part.scanned and offset not in part.unfinished):
            raise ValueError(f"offset {offset} of pp {pp} is already done")
        if offset not in part.unfinished:
            part.unfinished.add(offset)

    def done(self, pp: int, offset: int) -> None:
        """Record that the message at ``offset`` is acked or dead-lettered for good."""
        part = self._part(pp)
        part.unfinished.discard(offset)
        if offset >= part.low_watermark() and offset not in part.done:
            part.done.add(offset)
        part.trim()

    def mark_scanned(self, pp: int, offset: int) -> None:
        """Every record of the queue in ``pp`` below ``offset`` has been ingested (or
        skipped as done). Never moves back; smaller values are ignored."""
        _offset(offset, "offset")
        part = self._part(pp)
        if offset > part.scanned:
            part.scanned = offset
            part.trim()

    def scanned_to(self, pp: int) -> int:
        part = self._parts.get(pp)
        return 0 if part is None else part.scanned

    def low_watermark(self, pp: int) -> int:
        part = self._parts.get(pp)
        return 0 if part is None else part.low_watermark()

    def window(self, pp: int) -> int:
        """Offsets tracked at or above the low watermark (outstanding + done): an
        upper bound of the pair form's ``acked_above`` once they are all done."""
        part = self._parts.get(pp)
        return 0 if part is None else len(part.unfinished) + len(part.done)

    def is_hole(self, pp: int, offset: int) -> bool:
        """True when ``offset`` lies below the highest done offset: ingesting it fills
        the window instead of widening it (needed to make progress after a restore)."""
        part = self._parts.get(pp)
        return part is not None and bool(part.done) and offset < part.done[-1]

    def outstanding(self) -> int:
        """Offsets tracked as not done, over all pps."""
        return sum(len(p.unfinished) for p in self._parts.values())

    def state(self) -> dict[int, PartitionAckState]:
        """The compact persistable state of every pp seen. O(outstanding + acked_above)."""
        out: dict[int, PartitionAckState] = {}
        for pp, part in self._parts.items():
            below = tuple(part.unfinished.irange(maximum=part.scanned, inclusive=(True, False)))
            above = tuple(part.done.irange(minimum=part.scanned))
            out[pp] = PartitionAckState.trusted(part.scanned, below, above)
        return out

    def pair_state(self) -> dict[int, tuple[int, list[int]]]:
        """The pair form ``{pp: (low_watermark, done offsets >= it)}``. ValueError while
        a pp restored from a compact state with pending offsets still has them (the
        pair form cannot express that: keep persisting such a group compactly)."""
        out: dict[int, tuple[int, list[int]]] = {}
        for pp, part in self._parts.items():
            if part.low_watermark() < part.unlisted_below:
                raise ValueError(f"pp {pp} was restored from a compact state: use the compact form")
            out[pp] = (part.low_watermark(), list(part.done))
        return out

    def pps(self) -> list[int]:
        return sorted(self._parts)
