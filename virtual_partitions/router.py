"""ProduceRouter: where a message goes, decided from memory.

``route(queue, key, ctx)`` answers ``Route(queue_id, vp, pp, key_hash, ctx_id,
epoch)``:

- ``key_hash`` is ``key_hash(key)`` (MurmurHash3 32-bit, seed 0, unsigned) for a
  keyed message; a keyless message (``key=None``) gets the next hash of a
  per-queue ``KeylessSpreader`` (random start), so keyless traffic visits the
  vps round robin. Writers store this hash with the record.
- ``vp = key_hash mod V`` with V the queue's vp count in the cached placement
  map, ``pp = placement[vp]``, ``epoch`` the map epoch the decision was made
  under (the write node refuses it when its own map is newer).
- ``ctx_id`` is the interned isolation context.

Cost: ZERO Redis round trips when the queue, the map and the context are cached
(``MapCache`` keeps the first two fresh from announcements; the context cache
fills on first sight of a context: one round trip, once per process).

Errors: ``UnknownQueueError`` (a ``QueueNotFoundError``: HTTP 404) when the
queue is not registered; ``QueueNotPlacedError`` (retryable, HTTP 503) when it is
registered but the map does not place it yet.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any, NamedTuple

import mmh3

from vpq.metadata.contexts import ContextRegistry
from vpq.metadata.errors import MetadataError, QueueNotFoundError
from vpq.metadata.map_cache import MapCache, QueueEntry
from vpq.virtual_partitions.hashing import KeylessSpreader, key_hash, vp_of_hash


class UnknownQueueError(QueueNotFoundError):
    """Produce to a queue the registry does not know."""


class QueueNotPlacedError(MetadataError):
    """The queue exists but the placement map has no entry for it yet (retry shortly)."""

    def __init__(self, queue: str, epoch: int) -> None:
        self.queue = queue
        self.epoch = epoch
        super().__init__(f"queue {queue!r} is not placed by map epoch {epoch} yet")


class Route(NamedTuple):
    """Where one message goes (a named tuple: built per message on the produce path, where
    a frozen dataclass cost three times as much)."""

    queue_id: int
    vp: int
    pp: int
    key_hash: int
    ctx_id: int
    epoch: int


def _ctx_fields(ctx: Any) -> tuple[str, str, str]:
    """``(env, set, lane)`` from a tuple or an object with those attributes
    (``isolation.context.IsolationContext``)."""
    if isinstance(ctx, tuple):
        return ctx
    return (ctx.env, ctx.set, ctx.lane)


class RoutedBatch(NamedTuple):
    """Where each message of a batch goes, one list per field (``route_batch``); the
    context ids are one int for all messages or a list."""

    queue_id: int
    epoch: int
    key_hashes: list[int]
    vps: list[int]
    pps: list[int]
    ctx_ids: int | list[int]


class ProduceRouter:
    """Routes produce requests from the local caches; see the module docstring."""

    def __init__(self, map_cache: MapCache, contexts: ContextRegistry) -> None:
        self._cache = map_cache
        self._contexts = contexts
        self._spreaders: dict[int, KeylessSpreader] = {}

    def _entry(self, queue: str) -> QueueEntry:
        entry = self._cache.entry(queue)
        if entry is None:
            raise UnknownQueueError(queue)
        if entry.placement is None:
            raise QueueNotPlacedError(queue, entry.epoch)
        return entry

    async def _ctx_id(self, ctx: Any) -> int:
        env, set_, lane = _ctx_fields(ctx)
        cid = self._contexts.cached_id(env, set_, lane)
        if cid is None:
            cid = await self._contexts.intern(env, set_, lane)
        return cid

    def _hash(self, entry: QueueEntry, key: bytes | str | None) -> int:
        if key is not None:
            return key_hash(key)
        spreader = self._spreaders.get(entry.record.id)
        if spreader is None:
            spreader = self._spreaders[entry.record.id] = KeylessSpreader(random.getrandbits(32))
        return spreader.next_hash()

    def _route(self, entry: QueueEntry, key: bytes | str | None, ctx_id: int) -> Route:
        h = self._hash(entry, key)
        vp = vp_of_hash(h, entry.virtual_partitions)
        assert entry.placement is not None
        return Route(entry.record.id, vp, entry.placement[vp], h, ctx_id, entry.epoch)

    async def route(self, queue: str, key: bytes | str | None, ctx: Any) -> Route:
        """Route one message (``ctx``: ``(env, set, lane)`` or an IsolationContext)."""
        entry = self._entry(queue)
        return self._route(entry, key, await self._ctx_id(ctx))

    async def route_many(self, queue: str, messages: Iterable[tuple[bytes | str | None, Any]]) -> list[Route]:
        """Route a batch of ``(key, ctx)`` pairs of one queue, all under one map epoch."""
        entry = self._entry(queue)
        out: list[Route] = []
        seen: dict[Any, int] = {}  # ctx -> id within this batch: usually one or a few contexts
        for key, ctx in messages:
            cid = seen.get(ctx)
            if cid is None:
                cid = seen[ctx] = await self._ctx_id(ctx)
            out.append(self._route(entry, key, cid))
        return out

    async def route_batch(
        self,
        queue: str,
        keys: list[bytes | None],
        context: Any = None,
        contexts: list[Any] | None = None,
        spread_keys: list[bytes | None] | None = None,
    ) -> RoutedBatch:
        """Route a whole batch of one queue under one map epoch, column by column: ``keys``
        (UTF-8 bytes, None for keyless) and either one ``context`` for every message or
        ``contexts``, one per message. Same answers as ``route`` per message, except that
        a keyless message with a ``spread_keys`` entry (its dedup id) is hashed from it, so
        the same message sent again takes the same route."""
        entry = self._entry(queue)
        assert entry.placement is not None
        if None in keys:
            spreader = self._spreaders.get(entry.record.id)
            if spreader is None:
                spreader = self._spreaders[entry.record.id] = KeylessSpreader(random.getrandbits(32))
            nxt = spreader.next_hash
            if spread_keys is None:
                hashes = [nxt() if k is None else mmh3.hash(k, 0, False) for k in keys]
            else:
                hashes = [
                    mmh3.hash(k, 0, False) if k is not None else nxt() if s is None else mmh3.hash(s, 0, False)
                    for k, s in zip(keys, spread_keys)
                ]
        else:
            hashes = [mmh3.hash(k, 0, False) for k in keys]  # type: ignore[arg-type]
        mask = entry.virtual_partitions - 1
        vps = [h & mask for h in hashes]
        pps = list(map(entry.placement.__getitem__, vps))
        ctx_ids: int | list[int]
        if contexts is None:
            ctx_ids = await self._ctx_id(context)
        else:
            ids: dict[Any, int] = {}
            for ctx in contexts:
                if ctx not in ids:
                    ids[ctx] = await self._ctx_id(ctx)
            ctx_ids = [ids[c] for c in contexts]
        return RoutedBatch(entry.record.id, entry.epoch, hashes, vps, pps, ctx_ids)
