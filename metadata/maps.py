"""The placement map (with its epoch) and the lineage of every virtual partition.

Map contract (storage per queue: ``metadata.map_entries``):

- The map is the epoch plus one entry per queue, ``{"virtual_partitions": V,
  "placement": [pp of vp 0, ...]}``; ``current()`` assembles the wire format
  ``{"epoch": n, "queues": {...}}`` (one atomic read of every entry: O(map), for admin
  reads and the remap job). No map at all counts as epoch 0.
- ``publish_changes(changes, expected_epoch)`` is the compare-and-swap in Lua: it applies
  ``changes`` (queue -> entry or None for removal) and stores epoch ``expected_epoch + 1``
  only if the stored epoch is ``expected_epoch``, and announces ``{"type": "map",
  "epoch": n}`` and records it in the map history (``metadata.map_history``;
  ``history(limit)`` reads it) atomically with it. It costs the changes, not the map.
  Of any number of concurrent publishers starting from the same epoch exactly one
  wins. A retry of a publish that already succeeded returns True again. When the Redis
  master has a replica, the publish returns only once a replica has it (and everything
  written before it, lineage included), else raises ``ReplicaNotAcknowledged``
  (``metadata.durability``).
- ``publish(new_map, expected_epoch, base=...)`` publishes a whole map: the changes from
  ``base`` (the map the caller read at ``expected_epoch``; read again when not given)
  to ``new_map``, with the same CAS.
- ``update(fn)`` is the read/CAS/retry loop around it.
- Per-queue reads: ``entries(names)``, ``load()`` (vps per pp), ``delta(since)`` and
  ``load_queues(names, ids)`` (``metadata.map_entries``).

Lineage contract (per (queue, vp), oldest range first, ``to`` exclusive, ``None``
for the one open range, which can only be the last):

- ``open_range`` appends an open range (the previous one must be sealed);
  ``seal_range`` closes the open range at ``to_offset``; ``move_range`` does both
  at once (a remap of one vp).
- Fencing by epoch: every lineage change carries the map epoch it acts for. It is
  refused (False) when that epoch is older than the epoch of the vp's last change
  or newer than the stored map's epoch, so a remapper working from a stale map
  cannot rewrite the history a newer one wrote.
- Every operation is idempotent: repeating one that already took effect returns True.
- ``split_lineage(queue, old_v, epoch)``: when V doubles, vp ``i + old_v``
  inherits a copy of vp ``i``'s lineage (both live in the same pp ranges).
- Bulk forms for the admin's group commit (one round trip each):
  ``lineage_many(queues)``, ``delete_lineages(queues)``, and ``open_ranges(opens,
  epoch, starts)``: atomically (one Lua call), for each ``(queue, vp, pp)`` of ``opens``
  whose vp has no lineage at all, the range ``(pp, starts.get(pp, 0))`` opened at
  ``epoch`` (what
  ``open_range`` does to a vp without lineage; a vp that has lineage, e.g. opened by a
  concurrent creator, is left as it is; nothing is opened when ``epoch`` is newer than
  the stored map's), then the lineage of every queue named, as it is afterwards.

Offsets travel as decimal strings inside Lua and are never converted back from
Lua numbers, so they stay exact for any value below 2**53.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson
import redis.asyncio as aioredis

from vpq.metadata.durability import run_durably
from vpq.metadata.events import ANNOUNCE_LUA
from vpq.metadata.keys import Keys
from vpq.metadata.map_entries import (
    CHANGES_LUA,
    DELTA_LUA,
    LOAD_LUA,
    Changes,
    change_args,
    changes_between,
    decode_entry,
    map_token,
    publish_token,
)
from vpq.metadata.map_history import HISTORY_LUA, encode_note, entries

# KEYS: map, events_version, events_log, history, map queues, map changes, map load
# ARGV: expected, new epoch, channel, note, token, then (name, entry or '') pairs
_PUBLISH = ANNOUNCE_LUA + HISTORY_LUA + CHANGES_LUA + """
local cur = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
local expected = tonumber(ARGV[1])
local new = tonumber(ARGV[2])
if cur == new and redis.call('HGET', KEYS[1], 'token') == ARGV[5] then return 1 end
if cur ~= expected or new ~= expected + 1 then return 0 end
vpq_apply_changes(KEYS[5], KEYS[6], KEYS[7], ARGV[2], ARGV, 6)
redis.call('HSET', KEYS[1], 'epoch', ARGV[2], 'token', ARGV[5])
vpq_record_epoch(KEYS[4], ARGV[2], ARGV[4])
vpq_announce(KEYS[2], KEYS[3], ARGV[3], {type='map', epoch=new})
return 1
"""

# KEYS: map, map queues, map changes, map load ; ARGV: epoch the body was read at, then (name, entry) pairs
_MIGRATE = CHANGES_LUA + """
if not redis.call('HEXISTS', KEYS[1], 'body') then return 0 end
if (redis.call('HGET', KEYS[1], 'epoch') or '0') ~= ARGV[1] then return -1 end
vpq_apply_changes(KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV, 2)
redis.call('HDEL', KEYS[1], 'body')
return 1
"""

# KEYS: lineage hash, map ; ARGV: mode (open|seal|move), vp, epoch, to, pp, from
# range encoding: "pp,from,to,epoch" joined by ';' (to empty while open)
_LINEAGE = """
local mode, vp, epoch = ARGV[1], ARGV[2], ARGV[3]
local to, pp, from = ARGV[4], ARGV[5], ARGV[6]
local map_epoch = tonumber(redis.call('HGET', KEYS[2], 'epoch') or '0')
if tonumber(epoch) > map_epoch then return 0 end
local cur = redis.call('HGET', KEYS[1], vp)
local head, last = nil, nil
if cur then
  head, last = string.match(cur, '^(.*);([^;]*)$')
  if not last then head, last = nil, cur end
end
local lpp, lfrom, lto, lep
if last then
  lpp, lfrom, lto, lep = string.match(last, '^(%d+),(%d+),(%d*),(%d+)$')
end
local function opened_entry() return pp .. ',' .. from .. ',,' .. epoch end
local function join(h, e) if h then return h .. ';' .. e end return e end
if mode == 'open' then
  if last and lto == '' then
    if lpp == pp and lfrom == from and lep == epoch then return 1 end
    return 0
  end
  if last then
    if tonumber(epoch) < tonumber(lep) then return 0 end
    if lpp == pp and tonumber(from) < tonumber(lto) then return 0 end
  end
  redis.call('HSET', KEYS[1], vp, join(cur, opened_entry()))
  return 1
end
if not last then return 0 end
if mode == 'seal' then
  if lto ~= '' then
    if lto == to and lep == epoch then return 1 end
    return 0
  end
  if tonumber(epoch) < tonumber(lep) or tonumber(to) < tonumber(lfrom) then return 0 end
  redis.call('HSET', KEYS[1], vp, join(head, lpp .. ',' .. lfrom .. ',' .. to .. ',' .. epoch))
  return 1
end
-- move: seal the open range at `to` and open (pp, from)
-- already moved? (the last range is the one we would open, the one before it sealed at `to`)
if lto == '' and lpp == pp and lfrom == from and lep == epoch and head then
  local prev = string.match(head, '([^;]*)$')
  local _, _, pto, pep = string.match(prev, '^(%d+),(%d+),(%d*),(%d+)$')
  if pto == to and pep == epoch then return 1 end
end
if lto ~= '' then return 0 end
if tonumber(epoch) < tonumber(lep) or tonumber(to) < tonumber(lfrom) then return 0 end
if lpp == pp and tonumber(from) < tonumber(to) then return 0 end
local sealed = lpp .. ',' .. lfrom .. ',' .. to .. ',' .. epoch
redis.call('HSET', KEYS[1], vp, join(join(head, sealed), opened_entry()))
return 1
"""

# KEYS: lineage hash, map ; ARGV: old V, epoch
_SPLIT = """
local map_epoch = tonumber(redis.call('HGET', KEYS[2], 'epoch') or '0')
if tonumber(ARGV[2]) > map_epoch then return -1 end
local v = tonumber(ARGV[1])
local copied = 0
for i = 0, v - 1 do
  local cur = redis.call('HGET', KEYS[1], tostring(i))
  if cur and redis.call('HSETNX', KEYS[1], tostring(i + v), cur) == 1 then copied = copied + 1 end
end
return copied
"""


# KEYS: map, lineage hash of each queue ; ARGV: epoch, then per queue "vp:pp:from,vp:pp:from,..."
# returns the HGETALL (flat) of each lineage hash afterwards
_OPEN_NEW = """
local map_epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
local ok = tonumber(ARGV[1]) <= map_epoch
local out = {}
for i = 2, #KEYS do
  if ok then
    for vp, pp, from in string.gmatch(ARGV[i], '(%d+):(%d+):(%d+)') do
      redis.call('HSETNX', KEYS[i], vp, pp .. ',' .. from .. ',,' .. ARGV[1])
    end
  end
  out[#out + 1] = redis.call('HGETALL', KEYS[i])
end
return out
"""


class LineageRange(NamedTuple):
    """``[from_offset, to_offset)`` of physical partition ``pp``; ``to_offset`` None while open."""

    pp: int
    from_offset: int
    to_offset: int | None


def _decode_lineage(raw: str | None) -> list[LineageRange]:
    if not raw:
        return []
    out: list[LineageRange] = []
    for part in raw.split(";"):
        pp, frm, to, _epoch = part.split(",")
        out.append(LineageRange(int(pp), int(frm), int(to) if to else None))
    return out


def _decode_all(raw: Mapping[str, str]) -> dict[int, list[LineageRange]]:
    return {int(vp): _decode_lineage(v) for vp, v in sorted(raw.items(), key=lambda kv: int(kv[0]))}


def _nonneg(value: int, what: str) -> str:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{what} must be an integer >= 0, got {value!r}")
    return str(value)


def check_map(m: Mapping[str, Any]) -> None:
    """ValueError unless ``m`` is a well-formed wire-format map."""
    if not isinstance(m, Mapping) or set(m) != {"epoch", "queues"}:
        raise ValueError("a placement map is an object with exactly 'epoch' and 'queues'")
    _nonneg(m["epoch"], "epoch")
    if not isinstance(m["queues"], Mapping):
        raise ValueError("'queues' must be an object")
    for name, q in m["queues"].items():
        if not isinstance(q, Mapping) or set(q) != {"virtual_partitions", "placement"}:
            raise ValueError(f"queue {name!r}: needs exactly 'virtual_partitions' and 'placement'")
        v = q["virtual_partitions"]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1 or v & (v - 1):
            raise ValueError(f"queue {name!r}: virtual_partitions must be a power of two")
        pl = q["placement"]
        if not isinstance(pl, (list, tuple)) or len(pl) != v:
            raise ValueError(f"queue {name!r}: placement must list one pp per vp")
        for pp in pl:
            _nonneg(pp, f"queue {name!r}: pp")


def encode_map(m: Mapping[str, Any]) -> str:
    """Canonical JSON of a map (sorted keys, no spaces)."""
    return orjson.dumps(m, option=orjson.OPT_SORT_KEYS).decode()


class MapConflictError(RuntimeError):
    """``MapStore.update`` lost the compare-and-swap too many times in a row."""


class MapStore:
    """Placement map and lineage over one shared client (the caller owns it)."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._publish = client.register_script(_PUBLISH)
        self._lineage = client.register_script(_LINEAGE)
        self._split = client.register_script(_SPLIT)
        self._open_new = client.register_script(_OPEN_NEW)
        self._delta = client.register_script(DELTA_LUA)
        self._migrate = client.register_script(_MIGRATE)
        self._load = client.register_script(LOAD_LUA)

    async def current(self) -> dict[str, Any] | None:
        """The stored map (every entry, read atomically), or None before the first publish."""
        k = self._keys
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hget(k.map(), "epoch")
            pipe.hgetall(k.map_queues())
            epoch, raw = await pipe.execute()
        if epoch is None:
            return None
        return {"epoch": int(epoch), "queues": {name: decode_entry(v) for name, v in sorted(raw.items())}}

    async def migrate_whole_map(self) -> bool:
        """Store a map kept in the earlier one-document form (``p:map`` field ``body``) per
        queue, at its epoch, and drop the document; False when there is none. Safe to run
        from several processes at once (the first one does it)."""
        for _ in range(8):
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hget(self._keys.map(), "epoch")
                pipe.hget(self._keys.map(), "body")
                epoch, body = await pipe.execute()
            if body is None:
                return False
            queues = orjson.loads(body)["queues"]
            k = self._keys
            done = await self._migrate(keys=[k.map(), *self.map_keys()], args=[epoch or "0", *change_args(queues)])
            if int(done) >= 0:
                return bool(done)
        raise MapConflictError("the stored map kept changing while it was being migrated")

    async def epoch(self) -> int:
        """The stored map's epoch (0 before the first publish)."""
        raw = await self._client.hget(self._keys.map(), "epoch")
        return int(raw) if raw is not None else 0

    async def entries(self, names: Iterable[str]) -> tuple[int, dict[str, dict[str, Any]]]:
        """The epoch and the entries of those of ``names`` the map places, read atomically."""
        wanted = list(dict.fromkeys(names))
        k = self._keys
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hget(k.map(), "epoch")
            if wanted:
                pipe.hmget(k.map_queues(), wanted)
            got = await pipe.execute()
        epoch = int(got[0]) if got[0] is not None else 0
        raw = got[1] if wanted else []
        return epoch, {n: decode_entry(r) for n, r in zip(wanted, raw, strict=True) if r is not None}

    async def commit_base(self, names: Iterable[str]) -> tuple[int, dict[str, dict[str, Any]], dict[int, int]]:
        """``entries(names)`` and ``load()`` read together atomically (one round trip)."""
        wanted = list(dict.fromkeys(names))
        k = self._keys
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hget(k.map(), "epoch")
            pipe.hgetall(k.map_load())
            if wanted:
                pipe.hmget(k.map_queues(), wanted)
            got = await pipe.execute()
        epoch = int(got[0]) if got[0] is not None else 0
        load = {int(pp): int(n) for pp, n in got[1].items() if int(n) > 0}
        raw = got[2] if wanted else []
        return epoch, {n: decode_entry(r) for n, r in zip(wanted, raw, strict=True) if r is not None}, load

    async def load(self) -> dict[int, int]:
        """How many vps the map places on each pp (pps with none absent)."""
        raw = await self._client.hgetall(self._keys.map_load())
        return {int(pp): int(n) for pp, n in raw.items() if int(n) > 0}

    async def delta(self, since: int) -> tuple[int, list[tuple[str, int]]]:
        """The stored epoch and every queue whose entry changed (or went) after epoch
        ``since``, with the epoch of that change, read atomically."""
        k = self._keys
        epoch, flat = await self._delta(keys=[k.map(), k.map_changes()], args=[int(since)])
        return int(epoch), [(flat[i], int(float(flat[i + 1]))) for i in range(0, len(flat), 2)]

    async def load_queues(
        self, names: Iterable[str] = (), ids: Iterable[int] = ()
    ) -> tuple[int, list[tuple[str, str | None, dict[str, Any] | None]]]:
        """The epoch and, for each of ``names`` and each known queue id of ``ids``: the
        name, its registry record (raw JSON, None when not registered) and its map entry
        (None when not placed), all read atomically."""
        names, ids = list(names), [int(i) for i in ids]
        k = self._keys
        out = await self._load(
            keys=[k.map(), k.map_queues(), k.queues(), k.queue_ids()], args=[len(names), *names, *ids]
        )
        rows = [
            (out[i], out[i + 1] or None, decode_entry(out[i + 2]) if out[i + 2] else None)
            for i in range(1, len(out), 3)
        ]
        return int(out[0]), rows

    def map_keys(self) -> list[str]:
        """The keys the per-queue storage of a publish touches (map queues, changes, load)."""
        k = self._keys
        return [k.map_queues(), k.map_changes(), k.map_load()]

    async def publish_changes(
        self, changes: Changes, expected_epoch: int, *, note: Mapping[str, Any] | None = None, checked: bool = False,
        token: str | None = None,
    ) -> bool:
        """Compare-and-swap of ``changes`` at ``expected_epoch + 1``; see the module
        docstring. ``checked``: the caller vouches that every entry is well-formed.
        ``token`` names what is published (default: a digest of ``changes``); a retry of a
        publish that took effect is recognised by it."""
        if not checked:
            check_map({"epoch": expected_epoch + 1, "queues": {n: q for n, q in changes.items() if q is not None}})
        k = self._keys
        pairs = change_args(changes)
        ok = await run_durably(
            self._client, self._publish,
            keys=[k.map(), k.events_version(), k.events_log(), k.map_history(), *self.map_keys()],
            args=[
                _nonneg(expected_epoch, "epoch"), expected_epoch + 1, k.events(), encode_note(note),
                token if token is not None else publish_token(pairs), *pairs,
            ],
        )
        return bool(ok)

    async def publish(
        self, new_map: Mapping[str, Any], expected_epoch: int, *, checked: bool = False,
        note: Mapping[str, Any] | None = None, base: Mapping[str, Any] | None = None,
    ) -> bool:
        """Compare-and-swap of a whole map; see the module docstring. ValueError on a
        malformed map or when ``new_map["epoch"] != expected_epoch + 1``. ``checked=True``:
        the caller vouches that every queue entry is well-formed, so ``check_map`` is
        skipped. ``note``: what the change is, recorded in the map history with the epoch
        (``metadata.map_history``). ``base``: the map the caller read at ``expected_epoch``
        (saves reading it again)."""
        if not checked:
            check_map(new_map)
        if new_map["epoch"] != expected_epoch + 1:
            raise ValueError(f"new map epoch must be {expected_epoch + 1}, got {new_map['epoch']}")
        changes = await self.changes_to(new_map, expected_epoch, base)
        if changes is None:
            return False
        return await self.publish_changes(changes, expected_epoch, note=note, checked=True, token=map_token(new_map))

    async def changes_to(
        self, new_map: Mapping[str, Any], expected_epoch: int, base: Mapping[str, Any] | None = None
    ) -> dict[str, Mapping[str, Any] | None] | None:
        """The changes from the stored map (``base`` when given, read at ``expected_epoch``)
        to ``new_map``; None when the stored map is at neither ``expected_epoch`` nor the
        new epoch (the CAS is lost anyway)."""
        if base is None or int(base["epoch"]) != expected_epoch:
            base = await self.current() or {"epoch": 0, "queues": {}}
            if int(base["epoch"]) not in (expected_epoch, expected_epoch + 1):
                return None
        return changes_between(base["queues"], new_map["queues"])

    async def history(self, limit: int) -> list[dict[str, Any]]:
        """The latest ``limit`` (>= 1) map epochs, newest first (``map_history.entries``)."""
        if limit < 1:
            raise ValueError("limit must be >= 1")
        return entries(await self._client.lrange(self._keys.map_history(), 0, limit - 1))

    async def update(
        self, fn: Callable[[dict[str, Any]], dict[str, Any] | None], max_attempts: int = 32
    ) -> dict[str, Any]:
        """Read the map (``{"epoch": 0, "queues": {}}`` when none), let ``fn`` return
        the next content (or None for no change), publish it at epoch + 1; retry
        from a fresh read when another publisher won. Returns the map in force
        afterwards. ``fn`` gets a deep copy and may mutate it; it must be pure
        (it can run several times). Raises ``MapConflictError`` after ``max_attempts``."""
        for _ in range(max_attempts):
            cur = await self.current() or {"epoch": 0, "queues": {}}
            nxt = fn(copy.deepcopy(cur))
            if nxt is None:
                return cur
            nxt = {"epoch": cur["epoch"] + 1, "queues": nxt["queues"]}
            if await self.publish(nxt, cur["epoch"], base=cur):
                return nxt
        raise MapConflictError(f"placement map update lost the epoch race {max_attempts} times")

    # lineage
    async def lineage(self, queue: str, vp: int) -> list[LineageRange]:
        return _decode_lineage(await self._client.hget(self._keys.lineage(queue), str(vp)))

    async def lineage_all(self, queue: str) -> dict[int, list[LineageRange]]:
        """Lineage of every vp of ``queue`` that has one (bulk, one round trip)."""
        return _decode_all(await self._client.hgetall(self._keys.lineage(queue)))

    async def lineage_many(self, queues: Iterable[str]) -> dict[str, dict[int, list[LineageRange]]]:
        """``lineage_all`` of each of ``queues`` (one round trip)."""
        names = list(dict.fromkeys(queues))
        if not names:
            return {}
        async with self._client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(self._keys.lineage(name))
            raw = await pipe.execute()
        return {name: _decode_all(r) for name, r in zip(names, raw, strict=True)}

    async def delete_lineages(self, queues: Iterable[str]) -> None:
        """``delete_lineage`` of each of ``queues`` (one round trip)."""
        keys = [self._keys.lineage(name) for name in dict.fromkeys(queues)]
        if keys:
            await self._client.delete(*keys)

    async def open_ranges(
        self, opens: Sequence[tuple[str, int, int]], epoch: int, starts: Mapping[int, int] | None = None
    ) -> dict[str, dict[int, list[LineageRange]]]:
        """See the module docstring (bulk forms): the lineage of every queue named in
        ``opens`` after opening ``(pp, starts.get(pp, 0))`` at ``epoch`` for each vp
        without lineage (``starts``: where a new queue's records may begin in each pp)."""
        ep = _nonneg(epoch, "epoch")
        starts = starts or {}
        per_queue: dict[str, list[str]] = {}
        for queue, vp, pp in opens:
            frm = _nonneg(starts.get(pp, 0), "from_offset")
            per_queue.setdefault(queue, []).append(f"{_nonneg(vp, 'vp')}:{_nonneg(pp, 'pp')}:{frm}")
        if not per_queue:
            return {}
        names = list(per_queue)
        raw = await self._open_new(
            keys=[self._keys.map(), *(self._keys.lineage(n) for n in names)],
            args=[ep, *(",".join(per_queue[n]) for n in names)],
        )
        return {
            name: _decode_all(dict(zip(flat[::2], flat[1::2], strict=True))) for name, flat in zip(names, raw, strict=True)
        }

    async def open_range(self, queue: str, vp: int, pp: int, from_offset: int, epoch: int) -> bool:
        return await self._lineage_op(queue, "open", vp, epoch, "", pp, from_offset)

    async def seal_range(self, queue: str, vp: int, to_offset: int, epoch: int) -> bool:
        return await self._lineage_op(queue, "seal", vp, epoch, to_offset, "", "")

    async def move_range(self, queue: str, vp: int, to_offset: int, pp: int, from_offset: int, epoch: int) -> bool:
        """Seal the open range at ``to_offset`` and open ``(pp, from_offset)`` atomically."""
        return await self._lineage_op(queue, "move", vp, epoch, to_offset, pp, from_offset)

    async def split_lineage(self, queue: str, old_virtual_partitions: int, epoch: int) -> int:
        """Copy vp i's lineage to vp i + old_V for every i that has one and whose
        child has none yet; returns how many were copied (-1: epoch is in the future)."""
        v = int(old_virtual_partitions)
        if v < 1 or v & (v - 1):
            raise ValueError("old_virtual_partitions must be a power of two")
        return int(await self._split(keys=[self._keys.lineage(queue), self._keys.map()], args=[v, _nonneg(epoch, "epoch")]))

    async def delete_lineage(self, queue: str) -> None:
        await self._client.delete(self._keys.lineage(queue))

    async def _lineage_op(
        self, queue: str, mode: str, vp: int, epoch: int, to: int | str, pp: int | str, frm: int | str
    ) -> bool:
        args = [
            mode,
            _nonneg(vp, "vp"),
            _nonneg(epoch, "epoch"),
            _nonneg(to, "to_offset") if to != "" else "",
            _nonneg(pp, "pp") if pp != "" else "",
            _nonneg(frm, "from_offset") if frm != "" else "",
        ]
        return bool(await self._lineage(keys=[self._keys.lineage(queue), self._keys.map()], args=args))
