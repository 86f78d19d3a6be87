"""What a hosted group persists of its ack state, and when. Pure, no I/O.

The store and the stored format are ``metadata.acks`` (compact form: the
OUTSTANDING offsets, so a single stuck message never makes the state grow with
every later ack, as the pair form ``(low_watermark, done offsets above it)`` would).

What is saved, per stream (``trim_state``): the compact state, except that when
it lists more than ``DEFAULT_MAX_LISTED`` outstanding offsets above the highest
done offset ``H`` (a backlog ingested but not delivered yet), it is cut just
above ``H``: ``scanned_to' = min(scanned_to, max(H + 1, floor))`` and only the
outstanding offsets below it are listed. Everything at or above
``scanned_to'`` is then "not done", which is exact because nothing there is
done (a successor re-reads from there). So the list stays small in the common
cases: consuming a backlog in order lists about the in-flight messages; a stuck
message plus thousands of later acks lists one offset. Its worst case is the
group's outstanding messages (``max_unacked``). ``H`` only has to be an upper
bound of the highest done offset (the caller records the highest offset of each
ack, per stream, and every dead-lettered one), and ``floor`` is the ``scanned_to`` of the state the
group was restored from (done offsets below it are implied, not listed).

``restored_states`` turns what ``AckStateStore.load`` read into checked
``PartitionAckState``s (ValueError when a stored state breaks their invariants).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping

from vpq.metadata.acks import StoredAckState, encode_state
from vpq.read_nodes.ack_tracker import PartitionAckState

DEFAULT_MAX_LISTED = 1000
"""Outstanding offsets above the highest done one listed before a state is cut there."""


def restored_states(stored: Mapping[int, StoredAckState]) -> dict[int, PartitionAckState]:
    """``PartitionAckState`` by stream of what the store loaded; ValueError when one
    breaks the compact form's invariants."""
    try:
        return {stream: PartitionAckState(*st) for stream, st in stored.items()}
    except (ValueError, TypeError) as exc:
        raise ValueError(f"malformed ack state: {exc}") from None


def trim_state(
    state: PartitionAckState, highest_done: int, floor: int, max_listed: int = DEFAULT_MAX_LISTED
) -> PartitionAckState:
    """``state``, cut just above the highest done offset when it lists more than
    ``max_listed`` outstanding offsets above it (see the module docstring).

    ``highest_done``: an upper bound of the highest acked or dead-lettered offset
    (-1 when none); ``floor``: the ``scanned_to`` the group was restored from (0
    when it started fresh). Never claims an offset done that ``state`` does not.
    Not cutting when few offsets are listed keeps ``scanned_to`` (and so the
    position a successor re-reads from) high in pps where the queue has few or
    no records."""
    if state.acked_above:
        return state
    cut = min(state.scanned_to, max(highest_done + 1, floor))
    if cut >= state.scanned_to:
        return state
    pending = state.pending_below
    first_above = bisect_left(pending, cut)
    if len(pending) - first_above <= max_listed:
        return state
    parked = tuple(seg for seg in state.parked if seg[1] < cut)  # at or above the cut all is "not done"
    delayed = state.delayed if state.delayed is not None and state.delayed[0] < cut else None
    return PartitionAckState(cut, pending[:first_above], (), parked, delayed)


class AckSnapshots:
    """What one hosted group last persisted, and what changed since. Pure.

    ``note_done(stream, offset)`` for the highest offset of each ack (per stream) and
    every dead-lettered one; ``changes(compact, token)`` gives the encoded states of the pps
    whose trimmed state differs from the last ``mark_saved`` one."""

    __slots__ = ("queue_id", "_highest", "_floors", "_saved")

    def __init__(self, queue_id: int, restored: Mapping[int, PartitionAckState] | None = None) -> None:
        self.queue_id = queue_id
        self._highest: dict[int, int] = {}
        self._floors: dict[int, int] = {}
        self._saved: dict[int, str] = {}
        for pp, st in (restored or {}).items():
            self._floors[pp] = st.scanned_to
            if st.acked_above:
                self._highest[pp] = st.acked_above[-1]

    def note_done(self, pp: int, offset: int) -> None:
        if offset > self._highest.get(pp, -1):
            self._highest[pp] = offset

    def trimmed(self, compact: Mapping[int, PartitionAckState]) -> dict[int, PartitionAckState]:
        return {
            pp: trim_state(st, self._highest.get(pp, -1), self._floors.get(pp, 0)) for pp, st in compact.items()
        }

    def changes(self, compact: Mapping[int, PartitionAckState], token: int) -> dict[int, str]:
        out: dict[int, str] = {}
        for pp, st in self.trimmed(compact).items():
            blob = encode_state(self.queue_id, token, st)
            if self._saved.get(pp) != blob:
                out[pp] = blob
        return out

    def mark_saved(self, blobs: Mapping[int, str]) -> None:
        self._saved.update(blobs)
