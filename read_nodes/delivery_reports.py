"""What ``GroupDelivery`` hands out besides deliveries: dead letters, the ack state to
persist (and ``restore``), lag, members and counters (see ``read_nodes.delivery``). A
base class of ``GroupDelivery``, sharing its state; split off so that each file has
one job.

Persistence: ``ack_state()`` gives per stream ``(low_watermark, acked_above)`` (the
pair form), ``compact_ack_state()`` a form bounded by the outstanding messages and
parked keys (the one ``metadata.acks`` stores); ``restore`` takes either (see
``read_nodes.ack_tracker``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from vpq.codec.message_id import decode_message_ids
from vpq.isolation.context import IsolationContext
from vpq.read_nodes.ack_tracker import AckStateLike, PartitionAckState
from vpq.read_nodes.delivery_types import DeadLetter, LagReport, MemberInfo


class DeliveryReports:
    """Dead letters, persistence and statistics of one group."""

    # ------------------------------------------------------------ dead letters
    def take_dead_letters(self) -> list[DeadLetter]:
        """Dead letters not handed out yet, oldest first. They stay outstanding in
        ``ack_state`` (so a crash redelivers them) until ``confirm_dead_letters``."""
        out = list(self._dead_untaken.values())
        self._dead_taken.update(self._dead_untaken)
        self._dead_untaken.clear()
        return out

    def confirm_dead_letters(self, ids: Iterable[str]) -> int:
        """The service has durably produced these dead letters to the DLQ: they are
        done for good. Returns how many were taken and not yet confirmed."""
        n = 0
        for pos in decode_message_ids(list(ids)):
            if self._dead_taken.pop(pos, None) is not None:
                self._tracker.done(*pos)
                n += 1
        return n

    # ------------------------------------------------------------- persistence
    def ack_state(self) -> dict[int, tuple[int, list[int]]]:
        """Per pp, ``(low_watermark, sorted done offsets >= it)``: every offset of this
        queue below the watermark is acked or dead-lettered (confirmed). Restored
        (``restore``), it makes a takeover redeliver exactly the messages not done. The watermark never goes backwards. See
        ``read_nodes.ack_tracker`` for its size and ``compact_ack_state``."""
        return self._tracker.pair_state()

    def compact_ack_state(self) -> dict[int, PartitionAckState]:
        """The same information bounded by the outstanding messages (see
        ``read_nodes.ack_tracker``); ``restore`` accepts either form."""
        return self._tracker.state(self._delays.heads())

    def low_watermark(self, pp: int) -> int:
        """Re-read ``pp`` from here after a restore: everything below is done."""
        return self._tracker.low_watermark(pp)

    def restore(self, states: Mapping[int, AckStateLike]) -> None:
        """Start from persisted ack states, per pp a ``(low_watermark, acked_above)``
        pair, an object with those attributes, or a ``PartitionAckState``; before any
        ingest. Records done there are skipped by ``ingest``; every other record is
        delivered again (delivery counts restart). ValueError when messages were
        already ingested or a state is malformed (nothing changes)."""
        if self._msgs or self._dead_untaken or self._dead_taken or len(self._delays):
            raise ValueError("restore must happen before any ingest")
        self._tracker.restore(states)

    # ------------------------------------------------------------------- stats
    def lag(self) -> LagReport:
        """Messages ingested and not yet done, by lane, env and set of the message,
        by vp, and the oldest one's timestamp (overall and per message context)."""
        by_lane: dict[str, int] = {}
        by_env: dict[str, int] = {}
        by_set: dict[str, int] = {}
        for ctx, n in self._ctx_count.items():
            by_lane[ctx.lane] = by_lane.get(ctx.lane, 0) + n
            by_env[ctx.env] = by_env.get(ctx.env, 0) + n
            by_set[ctx.set] = by_set.get(ctx.set, 0) + n
        by_vp: dict[int, int] = {}
        oldest: dict[IsolationContext, int] = {}
        mask = self._mask
        for msg in self._msgs.values():
            e = msg
            vp = e.key_hash & mask
            by_vp[vp] = by_vp.get(vp, 0) + 1
            ts = oldest.get(e.ctx)
            if ts is None or e.timestamp_ms < ts:
                oldest[e.ctx] = e.timestamp_ms
        return LagReport(
            len(self._msgs), by_lane, by_env, by_set, by_vp, min(oldest.values()) if oldest else None, oldest
        )

    def in_flight_by_context(self) -> dict[IsolationContext, int]:
        """Messages in flight per member context (kept incrementally for ``poll``)."""
        return {ctx: n for ctx, n in self._inflight_by_ctx.items() if n}

    def inflight_count(self, consumer_id: str) -> int:
        return len(self._consumer(consumer_id).inflight)

    def members(self) -> list[MemberInfo]:
        """The live consumers, by id."""
        return [
            MemberInfo(cid, c.ctx, tuple(sorted(c.vps)), len(c.inflight), c.last_seen)
            for cid, c in sorted(self._consumers.items())
        ]

    def stats(self) -> dict[str, int]:
        """Counters for metrics: outstanding, ready (runs ready to start), timers (in
        flight + delayed), in_flight, keys (keys held), blocked_keys (keys with a run
        out and more held behind it), blocked (messages held behind runs), parked_keys
        (keys whose later records wait in the log), dead_letters (not yet confirmed),
        delayed (deferred records not ingested yet: ``delivery_delays``)."""
        return {
            "outstanding": len(self._msgs),
            "ready": len(self._ready),
            "timers": len(self._timers),
            "in_flight": self._inflight,
            "keys": len(self._chains),
            "blocked_keys": sum(1 for c in self._chains.values() if c.counted),
            "blocked": self._blocked,
            "parked_keys": len(self._parked),
            "dead_letters": len(self._dead_untaken) + len(self._dead_taken),
            "delayed": len(self._delays),
        }
