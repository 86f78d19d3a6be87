"""Consumer groups: the group record and its membership with session timeouts.

Contract:

- A group is created by its first ``join`` with ``start`` (``earliest`` or
  ``latest``; ignored afterwards) and generation 0. ``set_start_offsets`` stores,
  once per pp (first writer wins), the offsets a ``latest`` group starts from.
- Every membership change (a new member, a member whose isolation context or
  session timeout changed, a leave, an expiry) bumps the group's generation by
  one and is announced (``{"type": "group", "op", "queue", "group",
  "generation", ...}``) atomically with it. A re-join with identical data is
  not a change (it only refreshes the session).
- Each member has a session deadline ``now + session_timeout_ms`` (a sorted set).
  ``heartbeat`` pushes it forward and returns the generation; a heartbeat that
  arrives after the deadline finds the member expired, removes it and returns
  None (the consumer must join again). ``expire`` removes every member whose
  deadline has passed and returns their ids.
- ``now_ms`` defaults to the Redis server clock (one clock for every node); tests
  may pass their own. All operations are single Lua scripts; ``join_many`` sends
  several joins' scripts in one pipeline (one round trip).
- ``delete_group`` removes every key the group owns, its ack state included.
- ``add_expired`` adds to the group's count of messages it never got because they
  were past the queue's retention (field ``expired`` of the group record; nothing
  when the group does not exist).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import redis.asyncio as aioredis

from vpq.metadata.contexts import normalize
from vpq.metadata.events import ANNOUNCE_LUA
from vpq.metadata.keys import Keys
from vpq.metadata.leases import group_resource
from vpq.metadata.names import check_id, check_name

StartPosition = Literal["earliest", "latest"]

_NOW = """
local now
if ARGV[1] ~= '' then now = tonumber(ARGV[1]) else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
"""
# Common layout. KEYS: groups set, group hash, deadlines, members, events_version, events_log
# ARGV: now ('' = Redis clock), channel, queue, group, consumer, ...
_PRELUDE = ANNOUNCE_LUA + _NOW + """
local channel, queue, group, consumer = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local function bump(op, extra)
  local gen = redis.call('HINCRBY', KEYS[2], 'generation', 1)
  local ev = {type='group', op=op, queue=queue, group=group, generation=gen}
  for k, v in pairs(extra) do ev[k] = v end
  vpq_announce(KEYS[5], KEYS[6], channel, ev)
  return gen
end
local function remove(id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
end
"""

# ARGV[6]: member info JSON, ARGV[7]: session timeout, ARGV[8]: start
_JOIN = _PRELUDE + """
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[2], 'start', ARGV[8], 'generation', 0, 'created_ms', now)
  redis.call('SADD', KEYS[1], group)
end
local old = redis.call('HGET', KEYS[4], consumer)
local gen
if old ~= ARGV[6] then
  redis.call('HSET', KEYS[4], consumer, ARGV[6])
  gen = bump('join', {consumer_id=consumer})
else
  gen = tonumber(redis.call('HGET', KEYS[2], 'generation'))
end
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[7]), consumer)
return gen
"""

_HEARTBEAT = _PRELUDE + """
local deadline = redis.call('ZSCORE', KEYS[3], consumer)
if not deadline then return false end
if tonumber(deadline) < now then
  remove(consumer)
  bump('expire', {consumer_ids={consumer}})
  return false
end
local info = cjson.decode(redis.call('HGET', KEYS[4], consumer))
redis.call('ZADD', KEYS[3], now + info['session_timeout_ms'], consumer)
return tonumber(redis.call('HGET', KEYS[2], 'generation'))
"""

_LEAVE = _PRELUDE + """
if not redis.call('ZSCORE', KEYS[3], consumer) then return false end
remove(consumer)
return bump('leave', {consumer_id=consumer})
"""

_EXPIRE = _PRELUDE + """
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)
if #dead == 0 then return {} end
for _, id in ipairs(dead) do remove(id) end
bump('expire', {consumer_ids=dead})
return dead
"""

# KEYS: start hash ; ARGV: pp, offset, pp, offset, ...
_SET_START = """
for i = 1, #ARGV, 2 do redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1]) end
return redis.call('HGETALL', KEYS[1])
"""

# KEYS: groups set, group hash, deadlines, members, start, events_version, events_log,
#       ack state, group lease, group fence counter, fence floor
# ARGV: channel, queue, group
_DELETE = ANNOUNCE_LUA + """
local existed = redis.call('EXISTS', KEYS[2]) == 1
local last = tonumber(redis.call('GET', KEYS[10]) or '0')
if last > tonumber(redis.call('GET', KEYS[11]) or '0') then redis.call('SET', KEYS[11], last) end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[8], KEYS[9], KEYS[10])
redis.call('SREM', KEYS[1], ARGV[3])
if not existed then return 0 end
vpq_announce(KEYS[6], KEYS[7], ARGV[1], {type='group', op='delete', queue=ARGV[2], group=ARGV[3]})
return 1
"""


# KEYS: group hash ; ARGV: n
_ADD_EXPIRED = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return redis.call('HINCRBY', KEYS[1], 'expired', tonumber(ARGV[1]))
"""


@dataclass(frozen=True, slots=True)
class Member:
    consumer_id: str
    env: str
    set: str
    lane: str
    session_timeout_ms: int
    deadline_ms: int

    @property
    def context(self) -> tuple[str, str, str]:
        return (self.env, self.set, self.lane)


@dataclass(frozen=True, slots=True)
class GroupRecord:
    queue: str
    group: str
    start: str
    generation: int
    created_ms: int
    start_offsets: Mapping[int, int]
    expired: int = 0


def _ctx(ctx: Any) -> tuple[str, str, str]:
    """Accept ``(env, set, lane)`` or any object with ``env``/``set``/``lane`` attributes."""
    if isinstance(ctx, tuple):
        env, set_, lane = ctx
    else:
        env, set_, lane = ctx.env, ctx.set, ctx.lane
    return normalize(env, set_, lane)


def _now_arg(now_ms: int | None) -> str:
    return "" if now_ms is None else str(int(now_ms))


class GroupStore:
    """Group records and membership (the caller owns the client)."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._join = client.register_script(_JOIN)
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._leave = client.register_script(_LEAVE)
        self._expire = client.register_script(_EXPIRE)
        self._set_start = client.register_script(_SET_START)
        self._delete = client.register_script(_DELETE)
        self._add_expired = client.register_script(_ADD_EXPIRED)

    def _member_keys(self, queue: str, group: str) -> list[str]:
        k = self._keys
        check_name("queue", queue)
        check_name("group", group)
        return [
            k.groups(queue),
            k.group(queue, group),
            k.group_deadlines(queue, group),
            k.group_members(queue, group),
            k.events_version(),
            k.events_log(),
        ]

    def _args(self, now_ms: int | None, queue: str, group: str, consumer_id: str) -> list[str]:
        return [_now_arg(now_ms), self._keys.events(), queue, group, check_id("consumer id", consumer_id)]

    async def join(
        self,
        queue: str,
        group: str,
        consumer_id: str,
        ctx: Any,
        session_timeout_ms: int,
        now_ms: int | None = None,
        start: StartPosition = "earliest",
    ) -> int:
        """Add or refresh a member (creating the group); returns the group generation."""
        env, set_, lane = _ctx(ctx)
        if start not in ("earliest", "latest"):
            raise ValueError(f"start must be 'earliest' or 'latest', got {start!r}")
        if not isinstance(session_timeout_ms, int) or session_timeout_ms < 1:
            raise ValueError("session_timeout_ms must be a positive integer")
        info = json.dumps(
            {"env": env, "set": set_, "lane": lane, "session_timeout_ms": session_timeout_ms}, sort_keys=True
        )
        gen = await self._join(
            keys=self._member_keys(queue, group),
            args=[*self._args(now_ms, queue, group, consumer_id), info, session_timeout_ms, start],
        )
        return int(gen)

    async def join_many(
        self,
        queue: str,
        group: str,
        joins: list[tuple[str, Any, StartPosition]],
        session_timeout_ms: int,
    ) -> list[int]:
        """``join`` for each ``(consumer_id, ctx, start)`` in order, in one round trip (a
        pipeline, not a transaction: each join is its own script, atomic as ``join``'s);
        their generations. All the joins are written when it returns."""
        if not joins:
            return []
        if not isinstance(session_timeout_ms, int) or session_timeout_ms < 1:
            raise ValueError("session_timeout_ms must be a positive integer")
        keys = self._member_keys(queue, group)
        calls = []
        for consumer_id, ctx, start in joins:
            env, set_, lane = _ctx(ctx)
            if start not in ("earliest", "latest"):
                raise ValueError(f"start must be 'earliest' or 'latest', got {start!r}")
            info = json.dumps(
                {"env": env, "set": set_, "lane": lane, "session_timeout_ms": session_timeout_ms}, sort_keys=True
            )
            calls.append([*self._args(None, queue, group, consumer_id), info, session_timeout_ms, start])
        if len(calls) == 1:
            return [int(await self._join(keys=keys, args=calls[0]))]
        async with self._client.pipeline(transaction=False) as pipe:
            for args in calls:
                await self._join(keys=keys, args=args, client=pipe)
            gens = await pipe.execute()
        return [int(g) for g in gens]

    async def heartbeat(self, queue: str, group: str, consumer_id: str, now_ms: int | None = None) -> int | None:
        """Extend the session; the generation, or None when the member is unknown or expired."""
        gen = await self._heartbeat(
            keys=self._member_keys(queue, group), args=self._args(now_ms, queue, group, consumer_id)
        )
        return int(gen) if gen is not None else None

    async def leave(self, queue: str, group: str, consumer_id: str) -> int | None:
        """Remove the member; the new generation, or None when it was not a member."""
        gen = await self._leave(keys=self._member_keys(queue, group), args=self._args(None, queue, group, consumer_id))
        return int(gen) if gen is not None else None

    async def expire(self, queue: str, group: str, now_ms: int | None = None) -> list[str]:
        """Remove every member whose session deadline has passed; their ids."""
        dead = await self._expire(keys=self._member_keys(queue, group), args=self._args(now_ms, queue, group, "-"))
        return list(dead)

    async def members(self, queue: str, group: str) -> list[Member]:
        """Current members sorted by id (expired ones stay until ``expire`` or a heartbeat)."""
        k = self._keys
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hgetall(k.group_members(queue, group))
            pipe.zrange(k.group_deadlines(queue, group), 0, -1, withscores=True)
            infos, deadlines = await pipe.execute()
        out = []
        for cid, deadline in deadlines:
            raw = infos.get(cid)
            if raw is None:
                continue
            i = json.loads(raw)
            out.append(Member(cid, i["env"], i["set"], i["lane"], int(i["session_timeout_ms"]), int(deadline)))
        return sorted(out, key=lambda m: m.consumer_id)

    async def get_group(self, queue: str, group: str) -> GroupRecord | None:
        k = self._keys
        async with self._client.pipeline(transaction=True) as pipe:
            pipe.hgetall(k.group(queue, group))
            pipe.hgetall(k.group_start(queue, group))
            rec, starts = await pipe.execute()
        if not rec:
            return None
        return GroupRecord(
            queue,
            group,
            rec["start"],
            int(rec["generation"]),
            int(rec["created_ms"]),
            {int(pp): int(off) for pp, off in starts.items()},
            int(rec.get("expired", 0)),
        )

    async def add_expired(self, queue: str, group: str, n: int) -> int | None:
        """Add ``n`` to the group's ``expired`` count; the new count, None when there is
        no such group."""
        total = int(await self._add_expired(keys=[self._keys.group(queue, group)], args=[int(n)]))
        return None if total < 0 else total

    async def groups(self, queue: str) -> list[str]:
        return sorted(await self._client.smembers(self._keys.groups(queue)))

    async def set_start_offsets(self, queue: str, group: str, offsets: Mapping[int, int]) -> dict[int, int]:
        """Store each pp's start offset unless one is stored already; returns every
        stored start offset of the group (the ones that won)."""
        args: list[int] = []
        for pp, off in offsets.items():
            if int(pp) < 0 or int(off) < 0:
                raise ValueError("pp and offset must be >= 0")
            args += [int(pp), int(off)]
        flat = await self._set_start(keys=[self._keys.group_start(queue, group)], args=args)
        return {int(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}

    async def delete_group(self, queue: str, group: str) -> bool:
        """Remove every key of the group: its record, members, deadlines, start offsets,
        ack state (``metadata.acks``), lease and fence counter (whose last token goes to
        the fence floor, see ``metadata.leases``), and its name from the queue's set.
        True when the group existed (then the deletion is announced); its leftovers are
        removed either way."""
        k = self._keys
        resource = group_resource(queue, group)
        n = await self._delete(
            keys=[
                k.groups(queue),
                k.group(queue, group),
                k.group_deadlines(queue, group),
                k.group_members(queue, group),
                k.group_start(queue, group),
                k.events_version(),
                k.events_log(),
                k.acks(queue, group),
                k.lease(resource),
                k.fence(resource),
                k.fence_floor(),
            ],
            args=[k.events(), queue, group],
        )
        return bool(n)
