"""The remap fence: which vps no write node may append to while a cut-over runs.

The placement map's format is fixed (``metadata.maps.check_map`` accepts exactly
``epoch`` and ``queues``; stored per queue, ``metadata.map_entries``), so the fence lives next to it, in the hash
``{prefix}:remap:fence`` with fields ``id``, ``epoch``, ``body`` (JSON, see
``Fence``) and ``created_ms`` (Redis clock). At most one fence exists at a time.

Contract (every change is one Lua script, so map and fence always move together):

- ``publish_fenced(map, expected_epoch, fence)``: compare-and-swap publish of the
  map at ``expected_epoch + 1`` AND creation of the fence, announced like any map
  publish (``{"type": "map", "epoch": n}``). ``PUBLISHED`` (1), ``CONFLICT`` (0: the
  epoch moved) or ``BUSY`` (-1: another fence exists). A retry of a call that
  already succeeded answers ``PUBLISHED`` again.
- ``publish_unfenced(map, expected_epoch, fence_id)``: compare-and-swap publish AND
  removal of the fence ``fence_id``. ``PUBLISHED``, ``CONFLICT`` or ``GONE`` (-1: that
  fence no longer exists, e.g. another run recovered it). Idempotent like the above.
- Both publishes wait for a Redis replica's acknowledgement like any map publish
  (``metadata.durability``).
- So a fence and the map epoch always change in the same step: any consistent read
  of (map epoch, fence), ``snapshot()``, tells exactly which vps are fenced in that
  epoch. Other publishers (queue admin) leave the fence alone: a fence stays in force
  across their epochs until its cut-over removes it.
- A fence of queue ``q`` taken at ``V_f`` vps covers, under any later V, every vp
  ``j`` with ``j mod V_f`` fenced (children of a split inherit it).

Fence records never expire by themselves (an expired fence with half-moved lineage
would let the old partition accept records past its seal). ``age_ms`` tells how old
one is on the Redis clock; ``spark_rebalance.publisher`` recovers a fence older than
its ``ttl_ms`` (see ``docs/internals.md``, "Remap cut-over").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import redis.asyncio as aioredis

from vpq.metadata.durability import run_durably
from vpq.metadata.events import ANNOUNCE_LUA
from vpq.metadata.keys import Keys
from vpq.metadata.map_entries import CHANGES_LUA, change_args, map_token
from vpq.metadata.map_history import HISTORY_LUA, encode_note
from vpq.metadata.maps import MapStore, check_map

PUBLISHED = 1
CONFLICT = 0
BUSY = -1
GONE = -1

# KEYS: map, fence, events_version, events_log, history, map queues, map changes, map load
# ARGV: expected, new epoch, channel, fence id, fence body, note, token, then (name, entry or '') pairs
_PUBLISH_FENCED = ANNOUNCE_LUA + HISTORY_LUA + CHANGES_LUA + """
local cur = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
local new = tonumber(ARGV[2])
local fid = redis.call('HGET', KEYS[2], 'id')
if fid then
  if fid == ARGV[4] and cur == new and redis.call('HGET', KEYS[1], 'token') == ARGV[7] then return 1 end
  return -1
end
if cur ~= tonumber(ARGV[1]) or new ~= cur + 1 then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
vpq_apply_changes(KEYS[6], KEYS[7], KEYS[8], ARGV[2], ARGV, 8)
redis.call('HSET', KEYS[1], 'epoch', ARGV[2], 'token', ARGV[7])
redis.call('HSET', KEYS[2], 'id', ARGV[4], 'epoch', ARGV[2], 'body', ARGV[5], 'created_ms', tostring(now))
vpq_record_epoch(KEYS[5], ARGV[2], ARGV[6])
vpq_announce(KEYS[3], KEYS[4], ARGV[3], {type='map', epoch=new})
return 1
"""

# KEYS: map, fence, events_version, events_log, history, map queues, map changes, map load
# ARGV: expected, new epoch, channel, fence id, note, token, then (name, entry or '') pairs
_PUBLISH_UNFENCED = ANNOUNCE_LUA + HISTORY_LUA + CHANGES_LUA + """
local cur = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
local new = tonumber(ARGV[2])
local fid = redis.call('HGET', KEYS[2], 'id')
if fid ~= ARGV[4] then
  if not fid and cur == new and redis.call('HGET', KEYS[1], 'token') == ARGV[6] then return 1 end
  return -1
end
if cur ~= tonumber(ARGV[1]) or new ~= cur + 1 then return 0 end
vpq_apply_changes(KEYS[6], KEYS[7], KEYS[8], ARGV[2], ARGV, 7)
redis.call('HSET', KEYS[1], 'epoch', ARGV[2], 'token', ARGV[6])
redis.call('DEL', KEYS[2])
vpq_record_epoch(KEYS[5], ARGV[2], ARGV[5])
vpq_announce(KEYS[3], KEYS[4], ARGV[3], {type='map', epoch=new})
return 1
"""

# KEYS: map, fence -> {map epoch, fence body or false, created_ms or false, redis now ms}
_SNAPSHOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local f = redis.call('HMGET', KEYS[2], 'body', 'created_ms')
return {redis.call('HGET', KEYS[1], 'epoch') or '0', f[1], f[2], tostring(now)}
"""


def fence_key(keys: Keys) -> str:
    """The Redis key of the remap fence."""
    return f"{keys.prefix}:remap:fence"


@dataclass(frozen=True, slots=True)
class FencedQueue:
    """The fenced vps of one queue under ``virtual_partitions`` (V at fence time):
    ``moves[vp] = (from_pp, to_pp)``."""

    virtual_partitions: int
    moves: Mapping[int, tuple[int, int]]

    def __post_init__(self) -> None:
        v = self.virtual_partitions
        if not isinstance(v, int) or v < 1 or v & (v - 1):
            raise ValueError(f"virtual_partitions must be a power of two, got {v!r}")
        for vp in self.moves:
            if not 0 <= vp < v:
                raise ValueError(f"fenced vp {vp} out of range [0, {v})")
        object.__setattr__(self, "moves", MappingProxyType(dict(sorted(self.moves.items()))))

    def root(self, vp: int) -> int | None:
        """The fenced vp (under V at fence time) that ``vp`` (under any V) descends
        from, or None when ``vp`` is not fenced."""
        i = vp & (self.virtual_partitions - 1)
        return i if i in self.moves else None


@dataclass(frozen=True, slots=True)
class Fence:
    """One cut-over's fence: ``epoch`` is the map epoch published with it; ``ttl_ms``
    how long its publisher may take before another run recovers it."""

    id: str
    epoch: int
    ttl_ms: int
    queues: Mapping[str, FencedQueue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "queues", MappingProxyType(dict(sorted(self.queues.items()))))

    def fenced(self, queue: str, vp: int) -> bool:
        """Is ``vp`` of ``queue`` (under any V) fenced? No I/O."""
        fq = self.queues.get(queue)
        return fq is not None and fq.root(vp) is not None

    def pps(self) -> set[int]:
        """Every pp a fenced vp leaves or goes to."""
        return {pp for fq in self.queues.values() for mv in fq.moves.values() for pp in mv}

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "epoch": self.epoch,
                "ttl_ms": self.ttl_ms,
                "queues": {
                    q: {"virtual_partitions": fq.virtual_partitions, "moves": [[vp, a, b] for vp, (a, b) in fq.moves.items()]}
                    for q, fq in self.queues.items()
                },
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, raw: str) -> Fence:
        d = json.loads(raw)
        queues = {
            q: FencedQueue(int(fq["virtual_partitions"]), {int(vp): (int(a), int(b)) for vp, a, b in fq["moves"]})
            for q, fq in d["queues"].items()
        }
        return cls(str(d["id"]), int(d["epoch"]), int(d["ttl_ms"]), queues)


@dataclass(frozen=True, slots=True)
class FenceSnapshot:
    """A consistent read: the map epoch, the fence in force at it (or None), the
    fence's creation time and Redis's clock at the read (ms)."""

    map_epoch: int
    fence: Fence | None
    created_ms: int | None
    now_ms: int

    @property
    def age_ms(self) -> int | None:
        return None if self.created_ms is None else self.now_ms - self.created_ms

    @property
    def expired(self) -> bool:
        """True when a fence exists and is older than its ``ttl_ms``."""
        age = self.age_ms
        return self.fence is not None and age is not None and age > self.fence.ttl_ms


class FenceStore:
    """Reads and changes the fence together with the map (the caller owns the client)."""

    def __init__(self, client: aioredis.Redis, keys: Keys, maps: MapStore | None = None) -> None:
        self._client = client
        self._keys = keys
        self._maps = maps if maps is not None else MapStore(client, keys)
        self._fenced = client.register_script(_PUBLISH_FENCED)
        self._unfenced = client.register_script(_PUBLISH_UNFENCED)
        self._snapshot = client.register_script(_SNAPSHOT)

    def _map_keys(self) -> list[str]:
        k = self._keys
        return [k.map(), fence_key(k), k.events_version(), k.events_log(), k.map_history(), *self._maps.map_keys()]

    async def snapshot(self) -> FenceSnapshot:
        """The map epoch and the fence, read atomically."""
        k = self._keys
        epoch, body, created, now = await self._snapshot(keys=[k.map(), fence_key(k)])
        fence = Fence.from_json(body) if body else None
        return FenceSnapshot(int(epoch), fence, int(created) if created else None, int(now))

    async def current(self) -> Fence | None:
        return (await self.snapshot()).fence

    async def publish_fenced(
        self, new_map: Mapping[str, Any], expected_epoch: int, fence: Fence, *, note: Mapping[str, Any] | None = None,
        base: Mapping[str, Any] | None = None,
    ) -> int:
        """See the module docstring; ``fence.epoch`` must be the new map's epoch. ``note``
        goes to the map history with the epoch (``metadata.map_history``); ``base``: the map
        the caller read at ``expected_epoch`` (read again when not given). Only the queues
        that differ from it are written."""
        _check_next(new_map, expected_epoch)
        if fence.epoch != new_map["epoch"]:
            raise ValueError(f"fence epoch {fence.epoch} is not the published epoch {new_map['epoch']}")
        changes = await self._maps.changes_to(new_map, expected_epoch, base)
        if changes is None:
            return BUSY if (await self.snapshot()).fence is not None else CONFLICT
        args = [
            expected_epoch, new_map["epoch"], self._keys.events(), fence.id, fence.to_json(), encode_note(note),
            map_token(new_map), *change_args(changes),
        ]
        return int(await run_durably(self._client, self._fenced, self._map_keys(), args))

    async def publish_unfenced(
        self, new_map: Mapping[str, Any], expected_epoch: int, fence_id: str, *, note: Mapping[str, Any] | None = None,
        base: Mapping[str, Any] | None = None,
    ) -> int:
        """See the module docstring; ``note`` and ``base`` as for ``publish_fenced``."""
        _check_next(new_map, expected_epoch)
        changes = await self._maps.changes_to(new_map, expected_epoch, base)
        if changes is None:
            fence = (await self.snapshot()).fence
            return GONE if fence is None or fence.id != fence_id else CONFLICT
        args = [
            expected_epoch, new_map["epoch"], self._keys.events(), fence_id, encode_note(note), map_token(new_map),
            *change_args(changes),
        ]
        return int(await run_durably(self._client, self._unfenced, self._map_keys(), args))


def _check_next(new_map: Mapping[str, Any], expected_epoch: int) -> None:
    check_map(new_map)
    if new_map["epoch"] != expected_epoch + 1:
        raise ValueError(f"new map epoch must be {expected_epoch + 1}, got {new_map['epoch']}")


def fence_of(
    fence_id: str, epoch: int, ttl_ms: int, virtual_partitions: Mapping[str, int],
    moves: Iterable[tuple[str, int, int, int]],
) -> Fence:
    """A ``Fence`` from ``(queue, vp, from_pp, to_pp)`` moves and each queue's V."""
    per: dict[str, dict[int, tuple[int, int]]] = {}
    for q, vp, a, b in moves:
        per.setdefault(q, {})[vp] = (a, b)
    return Fence(fence_id, epoch, ttl_ms, {q: FencedQueue(virtual_partitions[q], m) for q, m in per.items()})
