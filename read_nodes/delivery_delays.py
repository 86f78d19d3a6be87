"""Delayed messages of ``GroupDelivery`` (``deliver_at_ms``, docs/api.md): held in a
``DelayIndex`` as (due time, position) only until they come due, then ingested like
a record read at that moment. A base class of ``GroupDelivery``, sharing its state;
split off so that each file has one job.

Contract:

- ``defer(entry, due_ms)``: the record must reach no consumer before ``due_ms``
  (Unix ms). It is outstanding from now on (``ack_state`` lists it as not done, so
  it holds back the low watermark and a successor re-reads it from the log), but
  it is not held in memory: only ``(due_ms, position)`` is. False when it is done,
  held already or deferred already.
- ``take_due(now_ms, limit)``: the deferred records due by ``now_ms``, by due
  time; the caller reads each record again and hands it to ``ingest`` (it then
  joins its key behind what the key holds, as if it arrived then: within a key,
  delayed messages take their place by due time), or gives it back with
  ``defer_again`` when it cannot be ingested now (no live consumer takes its
  context, or ``max_unacked`` messages are ready), or ``drop_deferred`` when the
  record is gone from the log (retention: it counts as done).
- ``next_delayed_ms()``: the earliest due time held, for the caller's timer.
- The compact ack state does not list deferred records: it names the stream's
  earliest one instead (``read_nodes.ack_tracker``, ``delayed``), since within a
  stream they come due, and are ingested, in ``(due, offset)`` order. After a
  restore, ``defer`` tells pending from done by the record's due time, and
  ``maybe_deferred`` tells the reader where it must read a record to ask.

Times here are Unix ms (record timestamps' clock), not the ``now_ms`` of
visibility deadlines.
"""

from __future__ import annotations

from collections.abc import Iterable

from vpq.read_nodes.delay_index import Due
from vpq.read_nodes.delivery_types import DeliveryEntry


class DeliveryDelays:
    """The delayed messages of one group (see the module docstring)."""

    def defer(self, entry: DeliveryEntry, due_ms: int) -> bool:
        """Hold ``entry`` until ``due_ms`` (see the module docstring)."""
        pos = (entry.pp, entry.offset)
        if pos in self._msgs or pos in self._dead_untaken or pos in self._dead_taken:
            return False
        if not self._tracker.defer(entry.stream, entry.offset, entry.key_hash, due_ms):
            return False
        return self._delays.add(entry.stream, entry.offset, due_ms)

    def maybe_deferred(self, stream: int, offset: int) -> bool:
        """True when ``is_done`` may be wrong for a record with a due time at ``offset``
        (a restored state's deferred messages cover it): read it and ``defer`` it."""
        return self._tracker.maybe_deferred(stream, offset)

    def defer_again(self, due: Iterable[Due]) -> None:
        """Give entries of ``take_due`` back (they stay outstanding)."""
        for due_ms, stream, offset in due:
            self._tracker.redefer(stream, offset)
            self._delays.add(stream, offset, due_ms)

    def drop_deferred(self, stream: int, offset: int) -> None:
        """An entry of ``take_due`` whose record no longer exists: done."""
        self._tracker.done(stream, offset)

    def take_due(self, now_ms: int, limit: int = 1024, skip: Iterable[int] = ()) -> list[Due]:
        """Remove and return ``(due_ms, stream, offset)`` of up to ``limit`` deferred
        records due by ``now_ms``, earliest first (streams in ``skip`` left alone)."""
        due = self._delays.take(now_ms, limit, skip)
        undefer = self._tracker.undefer
        for _due_ms, stream, offset in due:
            undefer(stream, offset)
        return due

    def next_delayed_ms(self, skip: Iterable[int] = ()) -> int | None:
        """The earliest due time of a deferred record (None when there is none)."""
        return self._delays.next_due(skip)

    def delayed(self) -> int:
        """Deferred records (not due, or due and not ingested yet)."""
        return len(self._delays)
