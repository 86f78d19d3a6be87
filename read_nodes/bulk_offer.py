"""``offer_cached``: the ingest scan's usual records offered to ``GroupDelivery`` in one
C call, or None where the extension ``_fast_offer`` is not built (the scan then offers
every record itself, record by record, to the same effect).

``offer_cached(entries, pp, ctx_id, stream, cache_data, delivery, cutoff, mask,
plain_vps)`` takes ``(offset, ref)`` entries of one stream from the iterator ``entries``
while each is a record that ``Ingestor._scan`` would hand to ``delivery.offer_routed``
and see ingested (True), and does exactly what the scan would do with it. Such a
record:

- has its vp (``key_hash & mask``) in ``plain_vps``, the vps no lineage order holds
  back (None: every vp);
- is cached in ``cache_data`` (the record cache's dict, ``pos -> (record, size)``);
- holds no header but a lone dedup id, and is not older than ``cutoff`` (the expiry
  cutoff in ms, or None);
- is of a context the group already holds messages of;
- is neither PARKed nor PAUSEd nor skipped (known or done) by ``offer_routed``.

It answers ``(ingested, cursor, entry, usable)``: records ingested (each a cache hit,
for the caller to count), ``offset + 1`` of the last one (None: none), the entry it
stopped at, untouched (None: the iterator ended), and False when the delivery state
rules the bulk path out (parked keys, an ack window per stream): then it took only
``entry``.

The caller guarantees: a live consumer takes the stream's context and nothing ran since
that was checked; no key of the scan is parked; no delayed record is due. The C file's
header lists the attributes of ``GroupDelivery``, ``AckTracker`` and ``PendingOffsets``
it reads and writes; ``tests/read_nodes/test_bulk_offer.py`` holds it to the
record-by-record path.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappush
from typing import Any

from vpq.codec.system_headers import DEDUP
from vpq.read_nodes.delivery_items import WAITING, Chain, Msg

OfferCached = Callable[..., "tuple[int, int | None, Any, bool]"]

offer_cached: OfferCached | None
try:
    from vpq.read_nodes._fast_offer import bind as _bind
    from vpq.read_nodes._fast_offer import offer_cached as _offer_cached
except ImportError:  # no C compiler at install: the scan offers record by record
    offer_cached = None
else:
    _bind(Msg, Chain, DEDUP, WAITING, heappush)
    offer_cached = _offer_cached
