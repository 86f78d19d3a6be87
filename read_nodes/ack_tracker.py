"""Persistable ack state of one consumer group on one queue, per physical partition.

What must survive a read-node failover is *which offsets of this queue are done*
(acked, or dead-lettered and safely produced to the DLQ). Two forms are offered;
a group must be persisted and restored with one form consistently.

**Pair form** ``(low_watermark, acked_above)`` (not persisted by the read node):
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

**Parked keys.** A key whose read-ahead is full is *parked*: its later records
stay in the log, and the scan goes on past them. A parked segment
``(key_hash, from_offset, until)`` says that the records with that key hash at
offsets ``>= from_offset`` (and ``< until`` when set, else ``< scanned_to``) are
not done and were not ingested. The compact form lists the segments, so its
size is the number of parked keys, not their backlog. A segment lowers
``low_watermark`` (a successor re-reads from there) but not the point below
which done offsets are forgotten: below ``scanned_to`` "done" is implied by
neither being pending nor matching a segment.

**Delayed messages.** A delayed message waiting for its due time (*deferred*,
``read_nodes.delivery_delays``) is outstanding, but the compact form does not list
it: it lists ``delayed = (floor, due_ms, offset)`` instead, meaning that a record
at an offset ``>= floor`` and ``< scanned_to`` that carries a due time is not done
when ``(its due_ms, its offset) >= (due_ms, offset)`` (the earliest deferred one
of the stream). Within a stream deferred messages come due, and are ingested, in
``(due, offset)`` order, so every one ingested before the state was taken sorts
below that point (it is listed in ``pending_below`` while not done), and every one
still deferred sorts at or above it. So the state stays the size of what is in
flight, however many delayed messages wait; only a reader that knows the
record's due time can tell (``defer``), and ``floor`` lowers ``low_watermark``.

The tracker is keyed by *stream* (``read_nodes.delivery_types.stream_of``: one
context of one pp); a plain pp is the stream of context id 0.

Pure logic: no I/O.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from heapq import heappush
from typing import Any

from sortedcontainers import SortedList

from vpq.read_nodes.offset_set import OffsetSet
from vpq.read_nodes.pending_offsets import PendingOffsets


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
    parked: tuple[tuple[int, int, int | None], ...] = ()
    delayed: tuple[int, int, int] | None = None

    def __post_init__(self) -> None:
        if self.delayed is not None:
            if len(self.delayed) != 3:
                raise ValueError(f"delayed is (floor, due_ms, offset), got {self.delayed!r}")
            for v in self.delayed:
                _offset(v, "delayed")
            object.__setattr__(self, "delayed", tuple(self.delayed))
        for seg in self.parked:
            if len(seg) != 3:
                raise ValueError(f"a parked segment is (key_hash, from_offset, until), got {seg!r}")
            h, start, until = seg
            _offset(h, "parked key hash")
            _offset(start, "parked from_offset")
            if until is not None and _offset(until, "parked until") < start:
                raise ValueError(f"parked segment {seg!r} ends before it starts")
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
    def trusted(
        cls, scanned_to: int, pending_below: tuple[int, ...], acked_above: tuple[int, ...],
        parked: tuple[tuple[int, int, int | None], ...] = (), delayed: tuple[int, int, int] | None = None,
    ) -> PartitionAckState:
        """Build without re-validating: for states derived from an ``AckTracker``, whose
        sorted sets already guarantee the invariants (validating costs O(n) per save,
        which stalled the event loop for milliseconds on every persist of a big backlog)."""
        obj = object.__new__(cls)
        object.__setattr__(obj, "scanned_to", scanned_to)
        object.__setattr__(obj, "pending_below", pending_below)
        object.__setattr__(obj, "acked_above", acked_above)
        object.__setattr__(obj, "parked", parked)
        object.__setattr__(obj, "delayed", delayed)
        return obj

    @property
    def low_watermark(self) -> int:
        """Every offset of the queue below this one is done."""
        lw = self.pending_below[0] if self.pending_below else self.scanned_to
        for _h, start, _until in self.parked:
            lw = min(lw, start)
        if self.delayed is not None:
            lw = min(lw, self.delayed[0])
        return lw

    def is_done(self, offset: int, key_hash: int | None = None) -> bool:
        """True when the record of this queue at ``offset`` is acked or dead-lettered
        (``key_hash``: the record's, needed when keys are parked; None counts any
        parked segment covering the offset). For a record with a due time see
        ``delayed`` (it may be pending where this says done)."""
        if offset < self.scanned_to:
            if _contains(self.pending_below, offset):
                return False
            return not any(
                (key_hash is None or h == key_hash) and start <= offset and (until is None or offset < until)
                for h, start, until in self.parked
            )
        return _contains(self.acked_above, offset)

    @classmethod
    def from_pair(cls, low_watermark: int, acked_above: Iterable[int] = ()) -> PartitionAckState:
        """The state "everything below ``low_watermark`` is done, plus ``acked_above``"
        (offsets below ``low_watermark`` in ``acked_above`` are ignored)."""
        return cls(low_watermark, (), tuple(o for o in acked_above if o >= low_watermark))

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict; ``from_json`` is its inverse."""
        return {
            "scanned_to": self.scanned_to, "pending_below": list(self.pending_below),
            "acked_above": list(self.acked_above), "parked": [list(seg) for seg in self.parked],
            "delayed": None if self.delayed is None else list(self.delayed),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionAckState:
        """Inverse of ``to_json``; ValueError on malformed input."""
        try:
            parked = tuple(tuple(seg) for seg in data.get("parked", ()))
            delayed = data.get("delayed")
            return cls(data["scanned_to"], tuple(data.get("pending_below", ())), tuple(data.get("acked_above", ())),
                       parked, None if delayed is None else tuple(delayed))  # type: ignore[arg-type]
        except (KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"malformed ack state: {e!r}") from None


def _contains(sorted_values: tuple[int, ...], value: int) -> bool:
    i = bisect_left(sorted_values, value)
    return i < len(sorted_values) and sorted_values[i] == value


AckStateLike = Any
"""A ``PartitionAckState``, a ``(low_watermark, acked_above)`` pair, or any object
with ``low_watermark`` and ``acked_above`` attributes."""


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


_STREAM_CTX = 1 << 32
"""Streams at or above this carry a context id (``read_nodes.delivery_types.stream_of``)."""


class _Partition:
    __slots__ = ("scanned", "unfinished", "done", "unlisted_below", "parked", "restored_parked", "restored_to",
                 "deferred", "restored_delay", "delay_to")

    def __init__(self, scanned: int = 0) -> None:
        self.scanned = scanned
        # live parked segments: id -> [key_hash, from_offset, until or None]
        self.parked: dict[int, list] = {}
        # segments of a restored state: kept (for is_done) until the scan passes restored_to
        self.restored_parked: tuple[tuple[int, int, int | None], ...] = ()
        self.restored_to = 0
        self.unfinished = PendingOffsets()  # outstanding offsets (ingested or restored pending)
        self.done: SortedList = SortedList()  # done offsets >= the low watermark
        # after restoring a compact state with pending offsets, the done offsets between
        # them and its scanned_to are not listed: the pair form is exact only once the
        # watermark has passed that point
        self.unlisted_below = 0
        self.deferred = OffsetSet()  # outstanding offsets of deferred (delayed) messages, 8 bytes each
        # the ``delayed`` of a restored state: kept (for ``defer``) until the scan passes delay_to
        self.restored_delay: tuple[int, int, int] | None = None
        self.delay_to = 0

    def done_below(self) -> int:
        """Every offset below this one that is neither pending nor parked is done."""
        low = min(self.unfinished[0], self.scanned) if self.unfinished else self.scanned
        if self.deferred and self.deferred[0] < low:
            low = self.deferred[0]
        if self.restored_delay is not None and self.restored_delay[0] < low:
            low = self.restored_delay[0]
        return low

    def low_watermark(self) -> int:
        lw = self.done_below()
        for _h, start, _until in self.segments():
            lw = min(lw, start)
        return lw

    def segments(self) -> list[tuple[int, int, int | None]]:
        out = [(h, start, until) for h, start, until in self.parked.values()]
        out.extend(self.restored_parked)
        return out

    def parked_covers(self, offset: int, key_hash: int | None) -> bool:
        for h, start, until in self.segments():
            if (key_hash is None or h == key_hash) and start <= offset and (until is None or offset < until):
                return True
        return False

    def trim(self, pairs: bool = True) -> None:
        done = self.done
        if done:
            lw = self.done_below() if pairs else self.scanned
            if done[0] < lw:
                del done[: done.bisect_left(lw)]


class AckTracker:
    """Tracks, per pp, the offsets of one queue that are not done yet.

    ``track`` an offset when its message is ingested, ``done`` it when acked or
    dead-lettered-and-confirmed; ``mark_scanned`` after the reader has ingested
    everything of the queue below a position. All operations O(log n) amortized.
    """

    __slots__ = ("_parts", "_pairs")

    def __init__(self, pair_form: bool = True) -> None:
        """``pair_form`` False: only the compact form is wanted, so done offsets below
        the scan position are not kept (there, "done" is implied by neither pending nor
        parked), and ``pair_state`` is not available."""
        self._parts: dict[int, _Partition] = {}
        self._pairs = pair_form

    def _part(self, pp: int) -> _Partition:
        part = self._get(pp)
        if part is None:
            _offset(pp, "pp")
            part = self._parts[pp] = _Partition()
        return part

    def _get(self, stream: int) -> _Partition | None:
        """The state of ``stream``; a stream of a context (id >= 1) first seen takes a
        copy of its pp's own state when there is one (a state kept per pp alone, as
        older versions persisted it, holds for every context of the pp)."""
        part = self._parts.get(stream)
        if part is not None or stream < _STREAM_CTX:
            return part
        legacy = self._parts.get(stream & (_STREAM_CTX - 1))
        if legacy is None:
            return None
        part = self._parts[stream] = _Partition(legacy.scanned)
        part.unfinished.update(legacy.unfinished)
        part.done.update(legacy.done)
        part.unlisted_below = legacy.unlisted_below
        part.restored_parked = legacy.restored_parked
        part.restored_to = legacy.restored_to
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
            part.unlisted_below = st.scanned_to if st.pending_below or st.parked or st.delayed else 0
            part.restored_parked = st.parked
            part.restored_to = st.scanned_to if st.parked else 0
            if st.delayed is not None and st.delayed[0] < st.scanned_to:
                part.restored_delay = st.delayed
                part.delay_to = st.scanned_to

    def is_done(self, pp: int, offset: int, key_hash: int | None = None) -> bool:
        """True when ``offset`` of stream ``pp`` is known to be done (ingest must skip
        it). ``key_hash``: the record's (None: any parked segment covering it counts)."""
        part = self._get(pp)
        if part is None:
            return False
        if offset < part.scanned:
            return (offset not in part.unfinished and offset not in part.deferred
                    and not part.parked_covers(offset, key_hash))
        return offset in part.done

    def maybe_deferred(self, pp: int, offset: int) -> bool:
        """True when a record at ``offset`` that carries a due time may still be pending
        although ``is_done`` says done (a restored ``delayed`` covers it): read it and
        ask ``defer``."""
        part = self._get(pp)
        d = None if part is None else part.restored_delay
        return d is not None and d[0] <= offset < part.delay_to  # type: ignore[union-attr]

    # --------------------------------------------------------- delayed messages
    def defer(self, pp: int, offset: int, key_hash: int, due_ms: int) -> bool:
        """The record at ``offset`` waits for ``due_ms``: outstanding, not listed in the
        compact form (see ``delayed`` in the module docstring). False when it is done
        or deferred already."""
        part = self._part(pp)
        deferred = part.deferred
        if offset in deferred:
            return False
        if offset >= part.scanned:
            if part.done and offset in part.done:
                return False
        elif offset not in part.unfinished and not part.parked_covers(offset, key_hash):
            d = part.restored_delay
            if d is None or not (d[0] <= offset < part.delay_to and (due_ms, offset) >= (d[1], d[2])):
                return False
        part.unfinished.discard(offset)
        deferred.add(offset)
        return True

    def undefer(self, pp: int, offset: int) -> None:
        """A deferred record came due and is ingested: outstanding as any other."""
        part = self._parts[pp]
        part.deferred.discard(offset)
        part.unfinished.add(offset)

    def redefer(self, pp: int, offset: int) -> None:
        """``undefer`` taken back (the record could not be ingested after all)."""
        part = self._parts[pp]
        part.unfinished.discard(offset)
        part.deferred.add(offset)

    def deferred(self, pp: int) -> int:
        part = self._get(pp)
        return 0 if part is None else len(part.deferred)

    def track_new(self, pp: int, offset: int, key_hash: int | None = None) -> bool:
        """``track`` an offset unless it is done (then False: skip it), in one call:
        what ingestion does for every record. ``key_hash``: as for ``is_done``."""
        part = self._parts.get(pp)
        if part is None:
            part = self._part(pp)
        unfinished = part.unfinished
        if offset >= part.scanned:
            if part.done and offset in part.done:
                return False
        else:
            if offset in unfinished:
                return True
            if not part.parked_covers(offset, key_hash):
                return False
        live = unfinished._live  # noqa: SLF001 - unfinished.add(offset), one call less per record
        if offset not in live:  # else tracked already
            live.add(offset)
            heappush(unfinished._heap, offset)  # noqa: SLF001
        return True

    def is_tracked(self, pp: int, offset: int) -> bool:
        """True when ``offset`` is tracked as not done (ingested, or pending from a restore)."""
        part = self._get(pp)
        return part is not None and offset in part.unfinished

    def track(self, pp: int, offset: int) -> None:
        """Record that the message at ``offset`` is outstanding (idempotent)."""
        _offset(offset, "offset")
        part = self._part(pp)
        if offset in part.done or (
            offset < part.scanned and offset not in part.unfinished and not part.parked_covers(offset, None)
        ):
            raise ValueError(f"offset {offset} of pp {pp} is already done")
        if offset not in part.unfinished:
            part.unfinished.add(offset)

    def done(self, pp: int, offset: int) -> None:
        """Record that the message at ``offset`` is acked or dead-lettered for good."""
        part = self._part(pp)
        part.unfinished.discard(offset)
        keep_from = part.done_below() if self._pairs else part.scanned
        if offset >= keep_from and offset not in part.done:
            part.done.add(offset)
        part.trim()

    def done_many(self, pp: int, offsets: list[int]) -> None:
        """``done`` for several offsets of one stream at once."""
        part = self._part(pp)
        part.unfinished.discard_many(offsets)
        below = part.done_below() if self._pairs else part.scanned
        done = part.done
        for offset in offsets:
            if offset >= below and offset not in done:
                done.add(offset)
        part.trim()

    def mark_scanned(self, pp: int, offset: int) -> None:
        """Every record of the queue in ``pp`` below ``offset`` has been ingested (or
        skipped as done). Never moves back; smaller values are ignored."""
        _offset(offset, "offset")
        part = self._part(pp)
        if offset > part.scanned:
            part.scanned = offset
            part.trim(self._pairs)
        if part.restored_parked and offset >= part.restored_to:
            part.restored_parked = ()  # every record they covered was ingested or parked again since
        if part.restored_delay is not None and offset >= part.delay_to:
            part.restored_delay = None  # every record it covered was read again (and deferred, if pending)

    # ------------------------------------------------------------- parked keys
    def park(self, pp: int, segment_id: int, key_hash: int, from_offset: int) -> None:
        """Records of ``key_hash`` in stream ``pp`` from ``from_offset`` on are left in
        the log (not ingested, not done) until ``unpark``; ``segment_id`` names it."""
        _offset(from_offset, "from_offset")
        self._part(pp).parked[segment_id] = [key_hash, from_offset, None]

    def park_from(self, pp: int, segment_id: int, from_offset: int) -> None:
        """The segment's records below ``from_offset`` were ingested (a refill)."""
        self._parts[pp].parked[segment_id][1] = from_offset

    def park_until(self, pp: int, segment_id: int, until: int) -> None:
        """The segment ends below ``until`` (later records of its key in this stream
        belong to a later segment)."""
        self._parts[pp].parked[segment_id][2] = until

    def unpark(self, pp: int, segment_id: int) -> None:
        part = self._parts.get(pp)
        if part is not None:
            part.parked.pop(segment_id, None)

    def scanned_to(self, pp: int) -> int:
        part = self._get(pp)
        return 0 if part is None else part.scanned

    def low_watermark(self, pp: int) -> int:
        """Everything of stream ``pp`` below this offset is done (parked keys included:
        a successor re-reads from here)."""
        part = self._get(pp)
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
        """Offsets tracked as not done, over all pps (deferred ones included)."""
        return sum(len(p.unfinished) + len(p.deferred) for p in self._parts.values())

    def state(self, first_deferred: Mapping[int, tuple[int, int]] | None = None) -> dict[int, PartitionAckState]:
        """The compact persistable state of every pp seen. O(listed + acked_above).
        ``first_deferred``: per stream with deferred records, ``(due_ms, offset)`` of the
        earliest (the delay index's head); without it deferred offsets are listed."""
        out: dict[int, PartitionAckState] = {}
        heads = first_deferred or {}
        for pp, part in self._parts.items():
            scanned = part.scanned
            below = tuple(part.unfinished.irange(maximum=scanned, inclusive=(True, False)))
            delayed = None
            if part.deferred and part.deferred[0] < scanned:
                head = heads.get(pp)
                if head is None:
                    below = tuple(sorted(below + tuple(part.deferred.irange(maximum=scanned, inclusive=(True, False)))))
                else:
                    delayed = (part.deferred[0], head[0], head[1])
            d = part.restored_delay
            if d is not None:  # records it covers may not have been read again yet
                if delayed is None:
                    delayed = d
                else:
                    delayed = (min(delayed[0], d[0]), *min(delayed[1:], d[1:]))
            above = tuple(part.done.irange(minimum=scanned))
            out[pp] = PartitionAckState.trusted(scanned, below, above, tuple(part.segments()), delayed)
        return out

    def pair_state(self) -> dict[int, tuple[int, list[int]]]:
        """The pair form ``{pp: (low_watermark, done offsets >= it)}``. ValueError while
        a pp restored from a compact state with pending offsets still has them (the
        pair form cannot express that: keep persisting such a group compactly)."""
        if not self._pairs:
            raise ValueError("this tracker keeps the compact form only")
        out: dict[int, tuple[int, list[int]]] = {}
        for pp, part in self._parts.items():
            if part.parked:
                raise ValueError(f"pp {pp} has parked keys: use the compact form")
            if part.low_watermark() < part.unlisted_below:
                raise ValueError(f"pp {pp} was restored from a compact state: use the compact form")
            out[pp] = (part.low_watermark(), list(part.done))
        return out

    def pps(self) -> list[int]:
        return sorted(self._parts)
