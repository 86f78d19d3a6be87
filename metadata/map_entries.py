"""The placement map stored per queue: one entry per queue, a change index, the pp load.

Storage (key names in ``metadata.keys``):

- ``p:map`` (hash): ``epoch``, the map's epoch (0 / absent before the first publish);
- ``p:map:queues`` (hash): queue name -> its entry, canonical JSON
  ``{"placement":[pp of vp 0,...],"virtual_partitions":V}`` (``encode_entry``);
- ``p:map:changes`` (sorted set): queue name -> the epoch that last changed its entry;
  a removed queue keeps its member (a tombstone, so nodes learn that it went);
- ``p:map:load`` (hash): pp -> how many vps the map places on it (pps with none absent).

The map at epoch E is the set of entries after the publish of E. Contract:

- Every publish is ONE Lua call that compare-and-swaps the epoch and applies a set of
  changes, queue -> entry or removal (the prelude ``CHANGES_LUA``, shared with the remap
  fence's scripts); it costs time in proportion to the changes, never to the map, and
  keeps ``p:map:changes`` and ``p:map:load`` exact in the same step. A change equal to
  what is stored is no change (not indexed).
- Each publish stores a token with the epoch (``p:map`` field ``token``: a digest of the
  whole map for whole-map publishes, ``map_token``, else of the changes, ``publish_token``),
  so a retry of a publish that already took effect (stored epoch is the new one and the
  token is the same) answers success again, and any other publish at that epoch does not.
- ``changes_between(base, new)`` turns two whole maps' ``queues`` into the changes that
  lead from one to the other (what whole-map publishers send; O(map), pure).
- Readers (``MapStore``): ``entries(names)``/``load_queues(names, ids)`` read the epoch
  and the named entries (with the queues' registry records) in one atomic call;
  ``delta(since)`` reads the epoch and every queue changed after ``since`` with its
  change epoch, atomically, so a cache that applies the delta knows exactly which of its
  entries the epochs up to the one read have changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

Changes = Mapping[str, "Mapping[str, Any] | None"]
"""queue name -> its new entry (wire format ``{"virtual_partitions", "placement"}``) or None (removed)."""

CHANGES_LUA = """
local function vpq_pps(entry)
  local out = {}
  local pl = string.match(entry, '"placement":%[([%d,]*)%]')
  if pl then for pp in string.gmatch(pl, '%d+') do out[#out + 1] = pp end end
  return out
end
local function vpq_apply_changes(entries_key, changes_key, load_key, epoch, argv, first)
  for i = first, #argv, 2 do
    local name, new = argv[i], argv[i + 1]
    local old = redis.call('HGET', entries_key, name)
    if (old or '') ~= new then
      if old then
        for _, pp in ipairs(vpq_pps(old)) do
          if redis.call('HINCRBY', load_key, pp, -1) <= 0 then redis.call('HDEL', load_key, pp) end
        end
      end
      if new == '' then
        redis.call('HDEL', entries_key, name)
      else
        redis.call('HSET', entries_key, name, new)
        for _, pp in ipairs(vpq_pps(new)) do redis.call('HINCRBY', load_key, pp, 1) end
      end
      redis.call('ZADD', changes_key, epoch, name)
    end
  end
end
"""
"""Lua prelude: ``vpq_apply_changes(entries_key, changes_key, load_key, epoch, ARGV,
first)`` over the (name, entry or '') pairs of ARGV from index ``first`` on."""

DELTA_LUA = """
local epoch = redis.call('HGET', KEYS[1], 'epoch') or '0'
return {epoch, redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[1], '+inf', 'WITHSCORES')}
"""
"""KEYS: map, map changes ; ARGV: since -> {epoch, flat [name, change epoch, ...]}"""

LOAD_LUA = """
local out = {redis.call('HGET', KEYS[1], 'epoch') or '0'}
local n = tonumber(ARGV[1])
local function one(name)
  out[#out + 1] = name
  out[#out + 1] = redis.call('HGET', KEYS[3], name) or ''
  out[#out + 1] = redis.call('HGET', KEYS[2], name) or ''
end
for i = 2, n + 1 do one(ARGV[i]) end
for i = n + 2, #ARGV do
  local name = redis.call('HGET', KEYS[4], ARGV[i])
  if name then one(name) end
end
return out
"""
"""KEYS: map, map queues, queue registry, queue ids ; ARGV: number of names, names, ids
-> {epoch, then name, record JSON or '', entry JSON or '' for each name and each known id}"""


def encode_entry(q: Mapping[str, Any]) -> str:
    """Canonical JSON of one queue's entry (what is stored and compared)."""
    return orjson.dumps({"placement": [int(pp) for pp in q["placement"]], "virtual_partitions": int(q["virtual_partitions"])}).decode()


def decode_entry(raw: str | bytes) -> dict[str, Any]:
    """An entry in the wire format ``{"virtual_partitions", "placement"}``."""
    d = orjson.loads(raw)
    return {"virtual_partitions": int(d["virtual_partitions"]), "placement": list(d["placement"])}


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a["virtual_partitions"] == b["virtual_partitions"] and list(a["placement"]) == list(b["placement"])


def changes_between(base: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Mapping[str, Any] | None]:
    """The changes leading from the ``queues`` of one map to those of another."""
    out: dict[str, Mapping[str, Any] | None] = {name: None for name in base if name not in new}
    for name, q in new.items():
        old = base.get(name)
        if old is None or not _same(old, q):
            out[name] = q
    return out


def change_args(changes: Changes) -> list[str]:
    """The (name, entry JSON or '') ARGV pairs of ``changes``, by name."""
    out: list[str] = []
    for name in sorted(changes):
        q = changes[name]
        out += [name, "" if q is None else encode_entry(q)]
    return out


def publish_token(pairs: Sequence[str]) -> str:
    """The token of a publish of these (name, entry) ARGV pairs."""
    return "c:" + hashlib.sha1("\n".join(pairs).encode()).hexdigest()


def map_token(m: Mapping[str, Any]) -> str:
    """The token of a publish of the whole map ``m`` (its ``queues``, canonically)."""
    h = hashlib.sha1()
    for name in sorted(m["queues"]):
        h.update(name.encode() + b"=" + encode_entry(m["queues"][name]).encode() + b"\n")
    return "m:" + h.hexdigest()
