"""Producer deduplication on the write node: one partition's index of dedup ids. Pure
logic, no I/O, no clock (callers pass the time).

A produced message may carry a ``dedup_id`` (docs/api.md), stored in its record as the
reserved header ``:dedup`` (``codec.system_headers``). Within its queue's
``dedup_window_ms`` a record whose (queue id, dedup id) matches one already stored in
the partition is not stored again: its answer is the stored record's offset and vp.

Contract of :class:`DedupIndex` (one per owned partition, used on the event-loop thread
only, so a check and the append that follows it are atomic):

- ``plan(...)`` classifies the records of one incoming batch: kept (to store),
  duplicate of a record already in the index, or duplicate of an earlier record of the
  same batch (which is kept). A record without a dedup id, or of a queue whose window
  is 0, is always kept and never indexed.
- ``register(...)`` records the kept records once their batch is submitted to the log
  (offsets ``base + rank``), before the event loop runs anything else: a retry that
  arrives while the first copy is still in the group commit finds it (the caller then
  waits for that offset to be durable before answering).
- An entry is valid while ``now - stored_ms < window`` of its queue *at lookup time*;
  expired entries are dropped lazily (``expire``, at most once per ``expire_every_ms``).
- Memory is bounded by ``max_ids``: beyond it the oldest entries go first (the window
  then effectively shortens; ``evicted_early`` counts them). An entry is a dict slot
  keyed by the id's bytes, its value one int packing (stored_ms, vp, offset): about
  100 bytes plus the id's bytes object (33 + its length), ~170 bytes for an SDK id
  (``tests/write_nodes/test_dedup.py`` measures it).
- Ids are compared as the bytes stored in the header (what the gateway wrote: printable
  ASCII).
- ``add_stored(...)`` feeds the index from the log (rebuild at open): entries are taken
  in offset order and an older live entry of the same id wins, as it did when appended.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Sequence
from typing import NamedTuple

from vpq.codec.columnar import FIXED_RECORD_BYTES
from vpq.codec.records import HEADER_SIZE, BatchView
from vpq.codec.system_headers import DEDUP
from vpq.codec.varint import decode_uvarint

WindowOf = Callable[[int], int]
"""queue id -> its ``dedup_window_ms`` now (0: deduplication off)."""

_DEDUP_KEY = DEDUP.encode("ascii")
_ONLY_DEDUP = b"\x01" + bytes([len(_DEDUP_KEY)]) + _DEDUP_KEY  # count 1, key length, key
DEFAULT_MAX_IDS = 1_000_000
EXPIRE_EVERY_MS = 1000
_OFFSET_BITS = 48  # an entry: stored_ms << 64 | vp << 48 | offset
_OFFSET_MASK = (1 << _OFFSET_BITS) - 1
_VP_MASK = 0xFFFF
_BIG_ENDIAN_HOST = sys.byteorder == "big"


class DedupPlan(NamedTuple):
    """How to store one batch: ``keep`` the record indices to store, in order;
    ``stored`` duplicate index -> (offset, vp) already in the log (maybe not yet
    durable); ``earlier`` duplicate index -> index of its first copy in this batch."""

    keep: list[int]
    stored: dict[int, tuple[int, int]]
    earlier: dict[int, int]

    @property
    def has_duplicates(self) -> bool:
        return bool(self.stored) or bool(self.earlier)


def dedup_ids(view: BatchView) -> list[bytes | None] | None:
    """Each record's dedup id (``None`` for a record without one) of the magic-2 batch
    ``view``, or ``None`` when no record has one. The batch must have passed
    ``codec.columnar.scan`` (lengths and header blocks already checked)."""
    n = view.record_count
    buf = view.buf
    q4 = 4 * n
    # columns: 4 x uint32, int64 deltas, then key lengths, value lengths, header lengths
    kl_at = view.pos + HEADER_SIZE + 4 * q4 + 8 * n
    hls = _column("I", buf, kl_at + 2 * q4, q4)
    if not any(hls):
        return None
    kls = _column("i", buf, kl_at, q4)
    vls = _column("I", buf, kl_at + q4, q4)
    pos = view.pos + HEADER_SIZE + FIXED_RECORD_BYTES * n + sum(kls) + kls.count(-1) + sum(vls)
    out: list[bytes | None] = [None] * n
    found = False
    raw = buf if isinstance(buf, bytes) else bytes(buf)
    only = _ONLY_DEDUP  # the block the gateway writes for a message whose only header is its id
    at = len(only)  # where the value's length is in such a block
    for i, hl in enumerate(hls):
        if hl:
            if raw.startswith(only, pos) and raw[pos + at] < 0x80 and hl == at + 1 + raw[pos + at]:
                value = raw[pos + at + 1 : pos + hl]
            else:
                value = _header_value(raw, pos, pos + hl)
            if value is not None:
                out[i] = value
                found = True
            pos += hl
    return out if found else None


def routes(view: BatchView) -> tuple[array, array]:
    """The (queue ids, vps) columns of the (checked) magic-2 batch ``view``."""
    q4 = 4 * view.record_count
    at = view.pos + HEADER_SIZE
    return _column("I", view.buf, at, q4), _column("I", view.buf, at + q4, q4)


def _column(code: str, buf: bytes, at: int, nbytes: int) -> array:
    col = array(code)
    col.frombytes(memoryview(buf)[at : at + nbytes])
    if _BIG_ENDIAN_HOST:  # pragma: no cover - columns are little-endian
        col.byteswap()
    return col


def _header_value(buf: bytes, pos: int, end: int) -> bytes | None:
    """The ``:dedup`` value of the (checked) header block ``buf[pos:end]``, or None."""
    key = _DEDUP_KEY
    count = buf[pos]
    if count >= 0x80:
        return _header_value_slow(buf, pos, end)
    p = pos + 1
    for _ in range(count):
        klen = buf[p]
        if klen >= 0x80:
            return _header_value_slow(buf, pos, end)
        kend = p + 1 + klen
        vlen = buf[kend]
        if vlen >= 0x80:
            return _header_value_slow(buf, pos, end)
        if klen == len(key) and buf[p + 1 : kend] == key:
            return bytes(buf[kend + 1 : kend + 1 + vlen])
        p = kend + 1 + vlen
    return None


def _header_value_slow(buf: bytes, pos: int, end: int) -> bytes | None:
    count, p = decode_uvarint(buf, pos, end)
    for _ in range(count):
        klen, p = decode_uvarint(buf, p, end)
        kend = p + klen
        vlen, p = decode_uvarint(buf, kend, end)
        if buf[kend - klen : kend] == _DEDUP_KEY:
            return bytes(buf[p : p + vlen])
        p += vlen
    return None


Ids = Sequence[bytes | None]


def _pack(offset: int, vp: int, stored_ms: int) -> int:
    return stored_ms << 64 | vp << _OFFSET_BITS | offset


def _coordinates(entry: int) -> tuple[int, int]:
    return entry & _OFFSET_MASK, (entry >> _OFFSET_BITS) & _VP_MASK


class DedupIndex:
    """See the module docstring."""

    def __init__(self, max_ids: int = DEFAULT_MAX_IDS, expire_every_ms: int = EXPIRE_EVERY_MS) -> None:
        if max_ids < 1:
            raise ValueError("max_ids must be >= 1")
        self._max_ids = max_ids
        self._expire_every_ms = expire_every_ms
        # queue id -> dedup id -> packed entry; each dict in insertion (about: time) order
        self._queues: dict[int, dict[bytes, int]] = {}
        self._count = 0
        self._expired_at = -1
        self.duplicates = 0  # records answered as duplicates
        self.evicted_early = 0  # entries dropped by max_ids while still in their window

    def __len__(self) -> int:
        return self._count

    def lookup(self, queue_id: int, dedup_id: bytes, now_ms: int, window_ms: int) -> tuple[int, int] | None:
        """(offset, vp) of the live entry, None when absent, expired or ``window_ms`` is 0."""
        if window_ms <= 0:
            return None
        ids = self._queues.get(queue_id)
        hit = ids.get(dedup_id) if ids is not None else None
        if hit is None or now_ms - (hit >> 64) >= window_ms:
            return None
        return _coordinates(hit)

    def plan(self, queue_ids: Sequence[int], ids: Ids, now_ms: int, window_of: WindowOf) -> DedupPlan:
        """Classify the records of one batch (see the module docstring)."""
        q0 = queue_ids[0]
        if queue_ids.count(q0) == len(queue_ids):  # the usual batch: one queue
            plan = self._plan_one(q0, ids, now_ms, window_of(q0))
        else:
            plan = self._plan_mixed(queue_ids, ids, now_ms, window_of)
        self.duplicates += len(plan.stored) + len(plan.earlier)
        return plan

    def _plan_one(self, queue_id: int, ids: Ids, now_ms: int, window: int) -> DedupPlan:
        if window <= 0:
            return DedupPlan(list(range(len(ids))), {}, {})
        keep: list[int] = []
        stored: dict[int, tuple[int, int]] = {}
        earlier: dict[int, int] = {}
        first: dict[bytes, int] = {}
        known = self._queues.get(queue_id) or {}
        oldest = (now_ms - window + 1) << 64  # entries at or above this are live
        for i, dedup_id in enumerate(ids):
            if dedup_id is not None:
                hit = known.get(dedup_id)
                if hit is not None and hit >= oldest:
                    stored[i] = _coordinates(hit)
                    continue
                j = first.setdefault(dedup_id, i)
                if j != i:
                    earlier[i] = j
                    continue
            keep.append(i)
        return DedupPlan(keep, stored, earlier)

    def _plan_mixed(self, queue_ids: Sequence[int], ids: Ids, now_ms: int, window_of: WindowOf) -> DedupPlan:
        keep: list[int] = []
        stored: dict[int, tuple[int, int]] = {}
        earlier: dict[int, int] = {}
        first: dict[tuple[int, bytes], int] = {}
        windows: dict[int, int] = {}
        queues = self._queues
        for i, dedup_id in enumerate(ids):
            if dedup_id is None:
                keep.append(i)
                continue
            qid = queue_ids[i]
            window = windows.get(qid)
            if window is None:
                window = windows[qid] = window_of(qid)
            if window <= 0:
                keep.append(i)
                continue
            known = queues.get(qid)
            hit = known.get(dedup_id) if known is not None else None
            if hit is not None and now_ms - (hit >> 64) < window:
                stored[i] = _coordinates(hit)
                continue
            j = first.setdefault((qid, dedup_id), i)
            if j != i:
                earlier[i] = j
                continue
            keep.append(i)
        return DedupPlan(keep, stored, earlier)

    def register(
        self,
        plan: DedupPlan,
        queue_ids: Sequence[int],
        vps: Sequence[int],
        ids: Ids,
        base_offset: int,
        now_ms: int,
        window_of: WindowOf,
    ) -> None:
        """Index the kept records of ``plan``, stored at ``base_offset + rank``."""
        queues = self._queues
        windows: dict[int, int] = {}
        before = self._count
        known: dict[bytes, int] = {}
        known_qid = -1
        stamp = now_ms << 64
        for rank, i in enumerate(plan.keep):
            dedup_id = ids[i]
            if dedup_id is None:
                continue
            qid = queue_ids[i]
            if qid != known_qid:
                window = windows.get(qid)
                if window is None:
                    window = windows[qid] = window_of(qid)
                if window <= 0:
                    continue
                got = queues.get(qid)
                if got is None:
                    got = queues[qid] = {}
                known, known_qid = got, qid
            if known.pop(dedup_id, None) is None:  # an expired entry goes to the young end
                self._count += 1
            known[dedup_id] = stamp | vps[i] << _OFFSET_BITS | (base_offset + rank)
        if self._count != before:
            self.expire(now_ms, window_of)
            if self._count > self._max_ids:
                self._evict_oldest(self._count - self._max_ids + max(1, self._max_ids // 100))

    def add_stored(self, queue_id: int, dedup_id: bytes, offset: int, vp: int, stored_ms: int, window_ms: int) -> None:
        """Index one record read from the log (rebuild; offsets ascending)."""
        if window_ms <= 0:
            return
        known = self._queues.get(queue_id)
        if known is None:
            known = self._queues[queue_id] = {}
        old = known.get(dedup_id)
        if old is not None:
            if stored_ms - (old >> 64) < window_ms:
                return  # the first copy stands (a later one was stored after it expired)
            del known[dedup_id]
        else:
            self._count += 1
        known[dedup_id] = _pack(offset, vp, stored_ms)
        if self._count > self._max_ids:
            self._evict_oldest(self._count - self._max_ids)

    def forget_from(self, offset: int) -> int:
        """Drop every entry at ``offset`` or later (the log gave those offsets back: a full
        disk refused the appends from there, and later records will reuse them); returns
        how many. Entries of a queue are in ascending offset order, so each queue's scan
        stops at its first older entry."""
        dropped = 0
        for ids in self._queues.values():
            doomed: list[bytes] = []
            for dedup_id in reversed(ids):
                if ids[dedup_id] & _OFFSET_MASK < offset:
                    break
                doomed.append(dedup_id)
            for dedup_id in doomed:
                del ids[dedup_id]
            dropped += len(doomed)
        self._count -= dropped
        return dropped

    def expire(self, now_ms: int, window_of: WindowOf, force: bool = False) -> int:
        """Drop entries out of their queue's window (at most once per
        ``expire_every_ms`` unless ``force``); returns how many went."""
        if not force and 0 <= self._expired_at and now_ms - self._expired_at < self._expire_every_ms:
            return 0
        self._expired_at = now_ms
        dropped = 0
        for qid in list(self._queues):
            known = self._queues[qid]
            window = window_of(qid)
            if window <= 0:
                dropped += len(known)
                del self._queues[qid]
                continue
            live = (now_ms - window + 1) << 64
            stale = []
            for dedup_id, entry in known.items():
                if entry >= live:
                    break
                stale.append(dedup_id)
            for dedup_id in stale:
                del known[dedup_id]
            dropped += len(stale)
            if not known:
                del self._queues[qid]
        self._count -= dropped
        return dropped

    def _evict_oldest(self, how_many: int) -> None:
        while how_many > 0 and self._queues:
            qid, known = min(self._queues.items(), key=lambda kv: next(iter(kv[1].values())))
            take = min(how_many, max(1, len(known) // 2), len(known))
            for dedup_id in _first(known, take):
                del known[dedup_id]
            if not known:
                del self._queues[qid]
            self._count -= take
            self.evicted_early += take
            how_many -= take


def _first(d: dict[bytes, int], n: int) -> list[bytes]:
    out: list[bytes] = []
    for k in d:
        if len(out) >= n:
            break
        out.append(k)
    return out


def resolve(plan: DedupPlan, base_offset: int, vps: Sequence[int]) -> tuple[list[int], list[int]]:
    """Every record's (offsets, vps) once the kept records are stored from ``base_offset``
    (a duplicate gets its stored copy's)."""
    n = len(vps)
    offsets = [-1] * n
    out_vps = list(vps)
    for rank, i in enumerate(plan.keep):
        offsets[i] = base_offset + rank
    for i, (offset, vp) in plan.stored.items():
        offsets[i] = offset
        out_vps[i] = vp
    for i, j in plan.earlier.items():
        offsets[i] = offsets[j]
        out_vps[i] = out_vps[j]
    return offsets, out_vps
