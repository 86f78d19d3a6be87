"""``offer``: ``admit`` and, when it says ``INGEST``, ``ingest`` of one record in one
call, without building a ``DeliveryEntry``: a held record is one ``Msg``. A base class of
``GroupDelivery``, sharing its state (see ``read_nodes.delivery`` for the rules).

The reader calls it for every record of a backlog it scans, so it looks up the
record's key, parked state and routing once for both steps; what it decides and
holds is exactly what ``admit`` followed by ``ingest(entry, admitted=True)`` would.
"""

from __future__ import annotations

from vpq.isolation.context import IsolationContext
from vpq.read_nodes.delivery_types import STREAM_PP_BITS, Admission


class DeliveryOffer:
    """Admission and ingestion of one record in one call."""

    def offer(
        self, pp: int, offset: int, ctx: IsolationContext, ctx_id: int, key_hash: int, key: bytes | None,
        timestamp_ms: int, priority: int = 0,
    ) -> str | bool:
        """``admit`` of the record at ``offset`` of ``pp`` in context ``ctx`` (id ``ctx_id``):
        ``Admission.NOBODY``, ``PAUSE`` or ``PARK`` (nothing changed); else it is ingested
        as ``ingest(DeliveryEntry.trusted(...), admitted=True)`` would, and the answer is
        that call's (True: held now; False: already known or done, skipped)."""
        if self._parked and self._key_order and (ctx_id, key_hash) in self._parked:
            return Admission.PARK
        if self._routes.route_of(ctx) is None:
            return Admission.NOBODY
        return self.offer_routed(pp, offset, (pp, offset), ctx, ctx_id, key_hash, key, timestamp_ms, priority)

    def offer_routed(
        self, pp: int, offset: int, pos: tuple[int, int], ctx: IsolationContext, ctx_id: int, key_hash: int,
        key: bytes | None, timestamp_ms: int, priority: int,
    ) -> str | bool:
        """``offer`` for a caller that knows a live consumer may take ``ctx`` (``routable``
        said so, and nothing ran since) and holds ``pos``, ``(pp, offset)``: the same
        answers but ``NOBODY``, without routing the context again."""
        key_order = self._key_order
        parked = self._parked
        if parked and key_order and (ctx_id, key_hash) in parked:
            return Admission.PARK
        stream = (ctx_id << STREAM_PP_BITS) | pp  # stream_of(pp, ctx_id)
        chain = chain_key = None
        if key_order and key is not None:
            chain_key = (key, ctx)
            chain = self._chains.get(chain_key)
            if chain is not None:
                cfg = self._config
                if len(chain.pending) >= cfg.key_read_ahead:
                    return Admission.PARK
                if chain.run and self._blocked >= cfg.blocked_read_ahead:
                    return Admission.PARK
        if chain is None or not chain.run:
            cfg = self._config
            if cfg.max_acked_above is None:  # can_ingest without a stream's ack window
                if len(self._msgs) - self._inflight - self._blocked - self._unroutable_held >= cfg.max_unacked:
                    return Admission.PAUSE
            elif not self.can_ingest(stream, offset):
                return Admission.PAUSE
        if pos in self._msgs or (self._dead_untaken and pos in self._dead_untaken) or (
            self._dead_taken and pos in self._dead_taken
        ):
            return False
        if not self._tracker.track_new(stream, offset, key_hash):
            return False
        self._add(pp, offset, key_hash, key, ctx, timestamp_ms, ctx_id, priority, pos, chain_key, chain)
        return True
