"""The queue registry: name -> interned numeric id + configuration.

Contract:

- ``create_or_update(name, config)`` creates the queue with the defaults for
  every field not given, or updates only the given fields of an existing queue.
  ``virtual_partitions`` may only grow (a smaller value raises
  ``QueueConflictError``). Returns ``(record, created)``. Atomic (one Lua
  script): concurrent creators agree on one id; an update that changes nothing
  is not announced.
- ``update_existing(name, config, queue_id)`` updates like ``create_or_update``
  but only the queue of that id: when ``name`` is gone, or was deleted and
  created again, it raises ``QueueNotFoundError`` and creates nothing (so a
  component acting for a queue, such as a read node growing it for its
  consumers, never brings a deleted queue back).
- Ids come from ``INCR`` and are never reused, even after ``delete``: a queue
  deleted and created again gets a new id, so records written under the old id
  can never be mistaken for the new queue's.
- Every change is announced (``{"type": "queue", "op": "create"|"update"|"delete",
  "name", "id"}``), atomically with it.
- ``delete`` removes only the registry entry. Its placement, lineage and groups
  (each with its ack state, lease and fence counter) are the admin flow's to drop
  (``MapStore``, ``GroupStore.delete_group``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from vpq.config.settings import QueueDefaults
from vpq.metadata.durability import run_durably
from vpq.metadata.errors import QueueConflictError, QueueNotFoundError
from vpq.metadata.events import ANNOUNCE_LUA
from vpq.metadata.keys import Keys
from vpq.metadata.names import check_name
from vpq.metadata.queue_config import dedup_window_of, default_config, validate_partial

# KEYS: queues, queue_ids, queue_seq, events_version, events_log
# ARGV: name, partial config JSON, default config JSON, channel, only this id ('' = any; then never create)
_CREATE_OR_UPDATE = ANNOUNCE_LUA + """
local name = ARGV[1]
local partial = cjson.decode(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = redis.call('HGET', KEYS[1], name)
local only_id = ARGV[5]
if only_id ~= '' then
  if not cur or tostring(cjson.decode(cur)['id']) ~= only_id then return {'gone', ''} end
end
if cur then
  local rec = cjson.decode(cur)
  local cfg = rec['config']
  local v = partial['virtual_partitions']
  if v and v < cfg['virtual_partitions'] then
    return {'conflict', tostring(cfg['virtual_partitions'])}
  end
  local changed = false
  for k, val in pairs(partial) do
    if cfg[k] ~= val then cfg[k] = val; changed = true end
  end
  if not changed then return {'same', cur} end
  rec['updated_ms'] = now
  local out = cjson.encode(rec)
  redis.call('HSET', KEYS[1], name, out)
  vpq_announce(KEYS[4], KEYS[5], ARGV[4], {type='queue', op='update', name=name, id=rec['id']})
  return {'updated', out}
end
local id = redis.call('INCR', KEYS[3])
local cfg = cjson.decode(ARGV[3])
for k, val in pairs(partial) do cfg[k] = val end
local rec = {name=name, id=id, config=cfg, created_ms=now, updated_ms=now}
local out = cjson.encode(rec)
redis.call('HSET', KEYS[1], name, out)
redis.call('HSET', KEYS[2], tostring(id), name)
vpq_announce(KEYS[4], KEYS[5], ARGV[4], {type='queue', op='create', name=name, id=id})
return {'created', out}
"""

# KEYS: queues, queue_ids, events_version, events_log ; ARGV: name, channel
_DELETE = ANNOUNCE_LUA + """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return false end
local rec = cjson.decode(cur)
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], tostring(rec['id']))
vpq_announce(KEYS[3], KEYS[4], ARGV[2], {type='queue', op='delete', name=ARGV[1], id=rec['id']})
return cur
"""

# KEYS: queues, queue_ids ; ARGV: id
_GET_BY_ID = """
local name = redis.call('HGET', KEYS[2], ARGV[1])
if not name then return false end
return redis.call('HGET', KEYS[1], name)
"""


@dataclass(frozen=True, slots=True)
class QueueRecord:
    """One registered queue. ``config`` holds every field of ``queue_config.FIELDS``."""

    name: str
    id: int
    config: Mapping[str, Any]
    created_ms: int
    updated_ms: int

    @property
    def virtual_partitions(self) -> int:
        return int(self.config["virtual_partitions"])

    @property
    def ordering(self) -> str:
        return str(self.config["ordering"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "id": self.id,
            "config": dict(self.config),
            "created_ms": self.created_ms,
            "updated_ms": self.updated_ms,
        }

    @classmethod
    def from_json(cls, raw: str) -> QueueRecord:
        d = json.loads(raw)
        cfg = {k: (int(v) if isinstance(v, float) else v) for k, v in d["config"].items()}
        cfg.setdefault("dedup_window_ms", dedup_window_of(cfg))  # a queue stored before the field
        return cls(d["name"], int(d["id"]), cfg, int(d["created_ms"]), int(d["updated_ms"]))


class QueueRegistry:
    """Queue registry over one shared client (the caller owns and closes it)."""

    def __init__(self, client: aioredis.Redis, keys: Keys, defaults: QueueDefaults | None = None) -> None:
        self._client = client
        self._keys = keys
        self._defaults = defaults or QueueDefaults()
        self._default_json = json.dumps(default_config(self._defaults))
        self._create_or_update = client.register_script(_CREATE_OR_UPDATE)
        self._delete = client.register_script(_DELETE)
        self._get_by_id = client.register_script(_GET_BY_ID)

    async def create_or_update(self, name: str, config: Mapping[str, Any] | None = None) -> tuple[QueueRecord, bool]:
        """Create ``name`` or update the given fields; ``(record, created)``.
        Raises ``QueueConfigError`` (invalid field) or ``QueueConflictError`` (V shrinks)."""
        return await self._write(name, config, None)

    async def update_existing(self, name: str, config: Mapping[str, Any], queue_id: int) -> QueueRecord:
        """Update the given fields of queue ``name`` only while it is the queue of id
        ``queue_id``; ``QueueNotFoundError`` (nothing created) otherwise."""
        rec, _created = await self._write(name, config, int(queue_id))
        return rec

    async def _write(self, name: str, config: Mapping[str, Any] | None, only_id: int | None) -> tuple[QueueRecord, bool]:
        check_name("queue", name)
        partial = validate_partial(config or {}, self._defaults.max_virtual_partitions)
        k = self._keys
        status, payload = await run_durably(
            self._client, self._create_or_update,
            keys=[k.queues(), k.queue_ids(), k.queue_seq(), k.events_version(), k.events_log()],
            args=[
                name, json.dumps(partial) if partial else "{}", self._default_json, k.events(),
                "" if only_id is None else str(only_id),
            ],
        )
        if status == "gone":
            raise QueueNotFoundError(name)
        if status == "conflict":
            raise QueueConflictError(
                name,
                f"virtual_partitions may only grow: it is {payload}, "
                f"{partial['virtual_partitions']} was asked",
            )
        return QueueRecord.from_json(payload), status == "created"

    async def get(self, name: str) -> QueueRecord | None:
        raw = await self._client.hget(self._keys.queues(), name)
        return QueueRecord.from_json(raw) if raw is not None else None

    async def get_many(self, names: Sequence[str]) -> list[QueueRecord | None]:
        """``get`` of each of ``names``, in order (one round trip)."""
        if not names:
            return []
        raw = await self._client.hmget(self._keys.queues(), list(names))
        return [QueueRecord.from_json(r) if r is not None else None for r in raw]

    async def require(self, name: str) -> QueueRecord:
        """Like ``get`` but raises ``QueueNotFoundError``."""
        rec = await self.get(name)
        if rec is None:
            raise QueueNotFoundError(name)
        return rec

    async def get_by_id(self, queue_id: int) -> QueueRecord | None:
        raw = await self._get_by_id(keys=[self._keys.queues(), self._keys.queue_ids()], args=[int(queue_id)])
        return QueueRecord.from_json(raw) if raw else None

    async def list(self) -> list[QueueRecord]:
        """Every queue, sorted by name."""
        raw = await self._client.hgetall(self._keys.queues())
        return [QueueRecord.from_json(raw[n]) for n in sorted(raw)]

    async def scan_retention(self, count: int = 1000) -> AsyncIterator[tuple[int, int]]:
        """``(queue id, retention_ms)`` of every queue, read ``count`` at a time (HSCAN:
        the registry is never copied whole into memory, whatever its size)."""
        async for _name, raw in self._client.hscan_iter(self._keys.queues(), count=count):
            d = json.loads(raw)
            yield int(d["id"]), int(d["config"].get("retention_ms", -1))

    async def last_id(self) -> int:
        """The largest queue id ever given (0 before the first queue). Ids are never
        reused, so an id at or below it that ``list`` lacks belongs to a deleted queue
        (read this first, then ``list``)."""
        raw = await self._client.get(self._keys.queue_seq())
        return int(raw) if raw is not None else 0

    async def delete(self, name: str) -> QueueRecord:
        """Remove ``name`` from the registry; returns its last record.
        Raises ``QueueNotFoundError`` when there is no such queue."""
        k = self._keys
        raw = await run_durably(
            self._client, self._delete,
            keys=[k.queues(), k.queue_ids(), k.events_version(), k.events_log()], args=[name, k.events()],
        )
        if not raw:
            raise QueueNotFoundError(name)
        return QueueRecord.from_json(raw)
