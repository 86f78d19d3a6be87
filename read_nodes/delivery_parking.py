"""Parked keys of ``GroupDelivery``: how many messages of each parked key the group
holds, when a key has room for a refill, and the parked segments in the ack state
(see ``read_nodes.delivery`` and ``read_nodes.parked_keys``). A base class of
``GroupDelivery``, sharing its state; split off so that each file has one job.
"""

from __future__ import annotations

from vpq.read_nodes.delivery_items import Msg, ParkKey


class DeliveryParking:
    """The parked keys of one group."""

    def park_key(self, ctx_id: int, key_hash: int, stream: int, segment_id: int, from_offset: int) -> None:
        """The reader leaves the records of (``ctx_id``, ``key_hash``) in ``stream`` from
        ``from_offset`` on in the log (segment ``segment_id``): ``admit`` parks the key
        everywhere until ``unpark_key``, and ``refills`` names it once it has room."""
        pk = (ctx_id, key_hash)
        if pk not in self._parked:
            self._parked[pk] = sum(len(c.pending) + len(c.run) for c in self._chains.values() if c.parked_key == pk)
        self._tracker.park(stream, segment_id, key_hash, from_offset)

    def park_progress(self, stream: int, segment_id: int, from_offset: int | None = None,
                      until: int | None = None) -> None:
        """A refill ingested a segment's records below ``from_offset``; or the segment
        ends below ``until``."""
        if from_offset is not None:
            self._tracker.park_from(stream, segment_id, from_offset)
        if until is not None:
            self._tracker.park_until(stream, segment_id, until)

    def drop_segment(self, stream: int, segment_id: int) -> None:
        """A segment was refilled to its end."""
        self._tracker.unpark(stream, segment_id)

    def unpark_key(self, ctx_id: int, key_hash: int) -> None:
        """The key has no parked record left: its records are admitted as usual again."""
        self._parked.pop((ctx_id, key_hash), None)
        self._refills.discard((ctx_id, key_hash))

    def key_room(self, ctx_id: int, key_hash: int) -> int:
        """How many more messages of a parked key a refill may hand over now."""
        held = self._parked.get((ctx_id, key_hash))
        if held is None:
            return 0
        room = self._config.key_read_ahead - held
        if room > 0 and self._blocked >= self._config.blocked_read_ahead:
            return 0
        return max(0, room)

    def refills(self) -> list[ParkKey]:
        """Parked keys that have had room since the last call (half their read-ahead)."""
        out = sorted(self._refills)
        self._refills.clear()
        return out

    def parked_keys(self) -> int:
        return len(self._parked)

    def _released(self, msg: Msg) -> None:
        """``msg`` left this state (done): a parked key may have room again."""
        pk = (msg.ctx_id, msg.key_hash)
        held = self._parked.get(pk)
        if held is not None:
            held -= 1
            self._parked[pk] = held
            if held <= self._config.key_read_ahead // 2:
                self._refills.add(pk)
