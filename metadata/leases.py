"""Node registry and resource leases with fencing tokens.

Nodes: ``register_node`` puts a node (role, id, address) in the registry until
``now + ttl_ms`` (Redis clock); ``renew_node`` extends a live registration
(False once it has expired: register again); ``nodes(role)`` lists the live
ones and prunes the expired. Registrations and deregistrations are announced
(``{"type": "node", "role", "node_id", "op"}``); expiries are not (readers see
them in ``nodes``).

Leases: a resource (``pp_resource(3)`` = ``"pp:3"`` for write nodes,
``group_resource(q, g)`` = ``"group:q:g"`` for read nodes) has at most one
owner at a time. ``acquire`` grants it when nobody holds it (or the caller
already does) and returns a FENCING TOKEN: ``INCR`` of a per-resource counter
that never expires, so every grant, including one after an expiry or a
re-acquire by the same node, gets a strictly higher token than any before. A
counter is only deleted with what it fences (``GroupStore.delete_group`` drops
a group's), and then its value is kept in ``p:fence_floor`` (the highest of
all deleted counters): a new counter starts from there, so a resource deleted
and created again never hands out a token its old holder may still have.
The lease itself is a key with a TTL: when its owner stops renewing, Redis
expires it and the next ``acquire`` hands the resource over with a higher
token. ``renew``/``release`` succeed only for the current (node, token) pair, so
a stale owner learns it has lost the lease; ``check_fence(resource, token)`` is
True only for the live lease's token, and stores that must reject stale
writers check it atomically inside their own scripts (see ``metadata.acks``).
A grant waits for a Redis replica's acknowledgement when the master has one
(``metadata.durability``), so a failover cannot hand the same token out twice;
renewals do not wait (a lost renewal only makes a lease expire sooner).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import redis.asyncio as aioredis

from vpq.metadata.durability import run_durably
from vpq.metadata.events import ANNOUNCE_LUA
from vpq.metadata.keys import Keys
from vpq.metadata.names import check_id, check_name

_RESOURCE_RE = re.compile(r"[A-Za-z0-9._:-]{1,300}")
_ROLE_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: nodes zset, info hash, events_version, events_log ; ARGV: node, ttl, info JSON, channel, role
_REGISTER = ANNOUNCE_LUA + _NOW + """
local before = redis.call('HGET', KEYS[2], ARGV[1])
local fresh = redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
-- announced when the node is new, and when it comes back with another address or meta
-- (a restarted node whose old entry is still there must not leave readers on the old one)
if fresh == 1 or before ~= ARGV[3] then
  vpq_announce(KEYS[3], KEYS[4], ARGV[4], {type='node', op='register', role=ARGV[5], node_id=ARGV[1]})
end
return now + tonumber(ARGV[2])
"""

# KEYS: nodes zset ; ARGV: node, ttl
_RENEW_NODE = _NOW + """
local d = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not d or tonumber(d) <= now then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
return 1
"""

# KEYS: nodes zset, info hash, events_version, events_log ; ARGV: node, channel, role
_DEREGISTER = ANNOUNCE_LUA + """
local n = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if n == 1 then
  vpq_announce(KEYS[3], KEYS[4], ARGV[2], {type='node', op='deregister', role=ARGV[3], node_id=ARGV[1]})
end
return n
"""

# KEYS: nodes zset, info hash ; returns flat [id, deadline, info, ...]
_NODES = _NOW + """
local dead = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
if #dead > 0 then
  redis.call('ZREM', KEYS[1], unpack(dead))
  redis.call('HDEL', KEYS[2], unpack(dead))
end
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
local out = {}
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = live[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], live[i]) or '{}'
end
return out
"""

# KEYS: lease, fence, fence floor ; ARGV: node, ttl
_ACQUIRE = """
local holder = redis.call('HGET', KEYS[1], 'node')
if holder and holder ~= ARGV[1] then return false end
if redis.call('EXISTS', KEYS[2]) == 0 then
  local floor = redis.call('GET', KEYS[3])
  if floor then redis.call('SET', KEYS[2], floor) end
end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'node', ARGV[1], 'token', token)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return token
"""

# KEYS: lease ; ARGV: node, token, ttl
_RENEW = """
local cur = redis.call('HMGET', KEYS[1], 'node', 'token')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0
"""

# KEYS: lease ; ARGV: node, token
_RELEASE = """
local cur = redis.call('HMGET', KEYS[1], 'node', 'token')
if cur[1] == ARGV[1] and cur[2] == ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""


def pp_resource(pp: int) -> str:
    """Lease resource of physical partition ``pp`` (owned by a write node)."""
    return f"pp:{int(pp)}"


def group_resource(queue: str, group: str) -> str:
    """Lease resource of consumer group ``group`` of ``queue`` (owned by a read node)."""
    return f"group:{check_name('queue', queue)}:{check_name('group', group)}"


def _check_resource(resource: str) -> str:
    if not isinstance(resource, str) or not _RESOURCE_RE.fullmatch(resource):
        raise ValueError(f"invalid lease resource {resource!r}")
    return resource


def _check_role(role: str) -> str:
    if not isinstance(role, str) or not _ROLE_RE.fullmatch(role):
        raise ValueError(f"invalid node role {role!r}: must match [a-z][a-z0-9_-]{{0,31}}")
    return role


def _check_ttl(ttl_ms: int) -> int:
    if not isinstance(ttl_ms, int) or isinstance(ttl_ms, bool) or ttl_ms < 1:
        raise ValueError(f"ttl_ms must be a positive integer, got {ttl_ms!r}")
    return ttl_ms


class NodeInfo(NamedTuple):
    node_id: str
    role: str
    address: str
    deadline_ms: int
    meta: Mapping[str, Any]


class Lease(NamedTuple):
    node_id: str
    token: int


class NodeRegistry:
    """The registry of live nodes per role (the caller owns the client)."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._keys = keys
        self._register = client.register_script(_REGISTER)
        self._renew = client.register_script(_RENEW_NODE)
        self._deregister = client.register_script(_DEREGISTER)
        self._nodes = client.register_script(_NODES)

    async def register_node(
        self, node_id: str, role: str, address: str, ttl_ms: int, meta: Mapping[str, Any] | None = None
    ) -> int:
        """Add or refresh ``node_id`` under ``role``; returns its deadline (ms, Redis clock)."""
        check_id("node id", node_id)
        k = self._keys
        info = json.dumps({"address": address, "meta": dict(meta or {})})
        deadline = await self._register(
            keys=[k.nodes(_check_role(role)), k.node_info(role), k.events_version(), k.events_log()],
            args=[node_id, _check_ttl(ttl_ms), info, k.events(), role],
        )
        return int(deadline)

    async def renew_node(self, node_id: str, role: str, ttl_ms: int) -> bool:
        """Extend a live registration; False when it expired or never existed."""
        return bool(await self._renew(keys=[self._keys.nodes(_check_role(role))], args=[node_id, _check_ttl(ttl_ms)]))

    async def deregister_node(self, node_id: str, role: str) -> bool:
        k = self._keys
        n = await self._deregister(
            keys=[k.nodes(_check_role(role)), k.node_info(role), k.events_version(), k.events_log()],
            args=[node_id, k.events(), role],
        )
        return bool(n)

    async def nodes(self, role: str) -> list[NodeInfo]:
        """Live nodes of ``role``, sorted by deadline (expired ones are pruned)."""
        k = self._keys
        flat = await self._nodes(keys=[k.nodes(_check_role(role)), k.node_info(role)])
        out: list[NodeInfo] = []
        for i in range(0, len(flat), 3):
            info = json.loads(flat[i + 2])
            out.append(NodeInfo(flat[i], role, info.get("address", ""), int(float(flat[i + 1])), info.get("meta", {})))
        return out


class LeaseManager:
    """Resource leases with fencing tokens (the caller owns the client)."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    async def acquire(self, resource: str, node_id: str, ttl_ms: int) -> int | None:
        """A new fencing token when ``node_id`` now holds ``resource``, None when another
        node does. Re-acquiring one's own lease issues a new, higher token."""
        k = self._keys
        token = await run_durably(
            self._client, self._acquire,
            keys=[k.lease(_check_resource(resource)), k.fence(resource), k.fence_floor()],
            args=[check_id("node id", node_id), _check_ttl(ttl_ms)],
        )
        return int(token) if token is not None else None

    async def renew(self, resource: str, node_id: str, token: int, ttl_ms: int) -> bool:
        """Extend the lease; False when (node_id, token) no longer holds it."""
        ok = await self._renew(
            keys=[self._keys.lease(_check_resource(resource))], args=[node_id, int(token), _check_ttl(ttl_ms)]
        )
        return bool(ok)

    async def renew_many(self, node_id: str, leases: Mapping[str, int], ttl_ms: int) -> dict[str, bool]:
        """Renew several leases in one round trip; resource -> renewed."""
        if not leases:
            return {}
        items = list(leases.items())
        async with self._client.pipeline(transaction=False) as pipe:
            for resource, token in items:
                await self._renew(
                    keys=[self._keys.lease(_check_resource(resource))],
                    args=[node_id, int(token), _check_ttl(ttl_ms)],
                    client=pipe,
                )
            results = await pipe.execute()
        return {r: bool(ok) for (r, _), ok in zip(items, results, strict=True)}

    async def release(self, resource: str, node_id: str, token: int) -> bool:
        """Give the lease up at once; False when (node_id, token) did not hold it."""
        ok = await self._release(keys=[self._keys.lease(_check_resource(resource))], args=[node_id, int(token)])
        return bool(ok)

    async def owner(self, resource: str) -> Lease | None:
        """The live holder of ``resource``, or None."""
        node, token = await self._client.hmget(self._keys.lease(_check_resource(resource)), ["node", "token"])
        return Lease(node, int(token)) if node is not None and token is not None else None

    async def owners(self, resources: Iterable[str]) -> dict[str, Lease | None]:
        """``owner`` of several resources in one round trip."""
        names = list(resources)
        async with self._client.pipeline(transaction=False) as pipe:
            for r in names:
                pipe.hmget(self._keys.lease(_check_resource(r)), ["node", "token"])
            rows = await pipe.execute()
        return {r: (Lease(n, int(t)) if n is not None and t is not None else None) for r, (n, t) in zip(names, rows, strict=True)}

    async def check_fence(self, resource: str, token: int) -> bool:
        """True only while ``token`` is the token of the live lease on ``resource``."""
        lease = await self.owner(resource)
        return lease is not None and lease.token == int(token)
