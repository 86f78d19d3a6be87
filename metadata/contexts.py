"""Interned isolation contexts: (env, set, lane) <-> small integer id.

Records carry the context id instead of three strings. Contract:

- ``intern(env, set, lane)`` is an atomic get-or-create (one Lua script): every
  caller, in every process, gets the same id for the same context, and ids are
  never reused or changed (``INCR``). Ids start at 1.
- ``resolve(id)`` is the inverse; ``KeyError`` for an id never handed out.
- Both directions are cached in the process forever (safe: ids never change),
  so after the first sight of a context neither call touches Redis.
  ``cached_id`` is the synchronous, Redis-free lookup the hot path uses.

Values are validated like the public API's (``[a-z0-9-]{0,63}``; an empty env
means ``prod``) so garbage never gets an id.
"""

from __future__ import annotations

import re

import redis.asyncio as aioredis

from vpq.metadata.keys import Keys

_NAME_RE = re.compile(r"[a-z0-9-]{0,63}")
DEFAULT_ENV = "prod"

Context = tuple[str, str, str]

# KEYS: contexts, context_ids, context_seq ; ARGV: token
_INTERN = """
local id = redis.call('HGET', KEYS[1], ARGV[1])
if id then return tonumber(id) end
id = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], ARGV[1], id)
redis.call('HSET', KEYS[2], id, ARGV[1])
return id
"""


def normalize(env: str, set_: str, lane: str) -> Context:
    """Validated ``(env, set, lane)`` with the empty env replaced by ``prod``."""
    for field, value in (("env", env), ("set", set_), ("lane", lane)):
        if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
            raise ValueError(f"invalid {field} {value!r}: must match [a-z0-9-]{{0,63}}")
    return (env or DEFAULT_ENV, set_, lane)


def token(ctx: Context) -> str:
    """``env/set/lane`` (``/`` cannot occur in a name, so this is unambiguous)."""
    return f"{ctx[0]}/{ctx[1]}/{ctx[2]}"


def from_token(tok: str) -> Context:
    parts = tok.split("/")
    if len(parts) != 3:
        raise ValueError(f"malformed context token {tok!r}")
    return normalize(parts[0], parts[1], parts[2])


class ContextRegistry:
    """Context interning with a process-local cache (the caller owns the client)."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._intern = client.register_script(_INTERN)
        self._ids: dict[Context, int] = {}
        self._contexts: dict[int, Context] = {}

    def cached_id(self, env: str, set_: str, lane: str) -> int | None:
        """The id of an already seen context, without any I/O (None when unseen).
        An empty env means ``prod``."""
        return self._ids.get((env or DEFAULT_ENV, set_, lane))

    async def intern(self, env: str, set_: str, lane: str) -> int:
        """The id of ``(env, set, lane)``, creating it on first use anywhere."""
        ctx = normalize(env, set_, lane)
        cid = self._ids.get(ctx)
        if cid is not None:
            return cid
        k = self._keys
        cid = int(await self._intern(keys=[k.contexts(), k.context_ids(), k.context_seq()], args=[token(ctx)]))
        self._remember(ctx, cid)
        return cid

    async def resolve(self, context_id: int) -> Context:
        """``(env, set, lane)`` of ``context_id``; KeyError when it was never handed out."""
        ctx = self._contexts.get(context_id)
        if ctx is not None:
            return ctx
        tok = await self._client.hget(self._keys.context_ids(), str(int(context_id)))
        if tok is None:
            raise KeyError(f"unknown isolation context id {context_id}")
        ctx = from_token(tok)
        self._remember(ctx, int(context_id))
        return ctx

    async def load_all(self) -> dict[int, Context]:
        """Every interned context (fills the cache); for admin views and warm-up."""
        raw = await self._client.hgetall(self._keys.context_ids())
        for cid, tok in raw.items():
            self._remember(from_token(tok), int(cid))
        return dict(self._contexts)

    def _remember(self, ctx: Context, cid: int) -> None:
        self._ids[ctx] = cid
        self._contexts[cid] = ctx
