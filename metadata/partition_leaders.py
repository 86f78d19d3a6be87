"""Leadership of replicated physical partitions: leader, leader epoch, replicas, in-sync set.

One hash per pp (``Keys.pp_leader``) holds ``leader`` (write-node index), ``leader_id``
(its node id), ``epoch``, ``replicas`` and ``isr`` (JSON lists of write-node indexes).
Every change is a compare-and-swap in one Lua script, so two nodes can never both
believe they lead one epoch:

- ``create(pp, replicas)``: the record of a new partition, epoch 0, no leader, every
  replica in sync (their logs are all empty); a no-op when it exists.
- ``elect(pp, node, node_id, expected_epoch)``: ``node`` becomes leader with epoch
  ``expected_epoch + 1`` only when the record is still at ``expected_epoch`` and
  ``node`` is in its in-sync set; the old leader leaves the in-sync set (it must catch
  up again). ``force=True`` (an operator's unclean election) skips the in-sync check,
  sets the in-sync set to ``[node]``, marks the record ``forced`` = ``node`` (the node
  may lead without an epoch history: its copy is all there is) and stores ``event``
  (JSON, the truncation event) as ``unclean``; a later non-forced ``elect`` clears
  ``forced``, never ``unclean`` (the last unclean election stays on record).
- ``set_isr(pp, node, epoch, isr)``: only the leader of the current epoch changes the
  in-sync set (always containing itself).
- ``report_hw(pp, node, epoch, hw)``: the leader of the current epoch records its high
  watermark (field ``hw``; what an unclean election may lose is measured from it).
- ``note_truncation(pp, epoch, node_id, count)``: a replica that truncated ``count``
  offsets of its log from before the unclean election of ``epoch`` adds them to that
  event (``truncated``: node id -> offsets); a no-op when the record's event is another.

Every script is idempotent for the same arguments (a retried ``elect`` that already
succeeded answers the record it wrote), as ``metadata.connection`` requires. Every
change waits for a Redis replica's acknowledgement when the master has one
(``metadata.durability``): a leader epoch undone by a failover could be won twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from vpq.metadata.durability import run_durably
from vpq.metadata.keys import Keys

_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'leader', -1, 'leader_id', '', 'epoch', 0, 'replicas', ARGV[1], 'isr', ARGV[1])
end
return redis.call('HGETALL', KEYS[1])
"""

# ARGV: node, node_id, expected epoch, force (0|1), event JSON (force only)
_ELECT = """
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch'))
if not epoch then return false end
local node = tonumber(ARGV[1])
local expected = tonumber(ARGV[3])
local leader = tonumber(redis.call('HGET', KEYS[1], 'leader'))
if epoch == expected + 1 and leader == node then return redis.call('HGETALL', KEYS[1]) end
if epoch ~= expected then return false end
local isr = cjson.decode(redis.call('HGET', KEYS[1], 'isr'))
local new = {}
local member = false
for _, r in ipairs(isr) do
  if r == node then member = true end
  if r ~= leader or r == node then new[#new + 1] = r end
end
if ARGV[4] == '1' then
  new = {node}
  redis.call('HSET', KEYS[1], 'forced', node, 'unclean', ARGV[5])
elseif not member then
  return false
else
  redis.call('HDEL', KEYS[1], 'forced')
end
redis.call('HSET', KEYS[1], 'leader', node, 'leader_id', ARGV[2], 'epoch', epoch + 1, 'isr', cjson.encode(new))
return redis.call('HGETALL', KEYS[1])
"""

# ARGV: node, epoch, isr JSON
_SET_ISR = """
local cur = redis.call('HMGET', KEYS[1], 'leader', 'epoch')
if tonumber(cur[1]) ~= tonumber(ARGV[1]) or tonumber(cur[2]) ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'isr', ARGV[3])
return 1
"""

# ARGV: node, epoch, hw
_REPORT_HW = """
local cur = redis.call('HMGET', KEYS[1], 'leader', 'epoch')
if tonumber(cur[1]) ~= tonumber(ARGV[1]) or tonumber(cur[2]) ~= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'hw', ARGV[3])
return 1
"""

# ARGV: event epoch, node id, offsets truncated
_NOTE_TRUNCATION = """
local raw = redis.call('HGET', KEYS[1], 'unclean')
if not raw then return 0 end
local event = cjson.decode(raw)
if tonumber(event['epoch']) ~= tonumber(ARGV[1]) then return 0 end
if type(event['truncated']) ~= 'table' then event['truncated'] = {} end
event['truncated'][ARGV[2]] = (tonumber(event['truncated'][ARGV[2]]) or 0) + tonumber(ARGV[3])
redis.call('HSET', KEYS[1], 'unclean', cjson.encode(event))
return 1
"""


@dataclass(frozen=True, slots=True)
class LeaderRecord:
    pp: int
    leader: int  # write-node index, -1 before the first election
    leader_id: str
    epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    forced: int = -1  # the node an unclean election named, until it claims the partition
    hw: int = -1  # the last high watermark the leader reported, -1 when none
    unclean: dict[str, Any] | None = None  # the last unclean election (its truncation event)


def _record(pp: int, flat: Sequence[str] | dict[str, str] | None) -> LeaderRecord | None:
    if not flat:
        return None
    d = flat if isinstance(flat, dict) else dict(zip(flat[::2], flat[1::2], strict=True))
    return LeaderRecord(
        pp,
        int(d["leader"]),
        d.get("leader_id", ""),
        int(d["epoch"]),
        tuple(int(x) for x in json.loads(d["replicas"])),
        tuple(int(x) for x in json.loads(d["isr"]) or ()),
        int(d.get("forced", -1)),
        int(d.get("hw", -1)),
        _event(d.get("unclean")),
    )


def _event(raw: str | None) -> dict[str, Any] | None:
    try:
        event = json.loads(raw) if raw else None
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _list(nodes: Iterable[int]) -> str:
    return json.dumps(sorted({int(n) for n in nodes}))


class PartitionLeaders:
    """The leadership records (the caller owns the client)."""

    def __init__(self, client, keys: Keys) -> None:  # noqa: ANN001 - a MetadataClient
        self._client = client
        self._keys = keys
        self._create = client.register_script(_CREATE)
        self._elect = client.register_script(_ELECT)
        self._set_isr = client.register_script(_SET_ISR)
        self._report_hw = client.register_script(_REPORT_HW)
        self._note_truncation = client.register_script(_NOTE_TRUNCATION)

    async def get(self, pp: int) -> LeaderRecord | None:
        return _record(pp, await self._client.hgetall(self._keys.pp_leader(pp)))

    async def get_many(self, pps: Iterable[int]) -> dict[int, LeaderRecord]:
        ids = list(pps)
        async with self._client.pipeline(transaction=False) as pipe:
            for pp in ids:
                pipe.hgetall(self._keys.pp_leader(pp))
            rows = await pipe.execute()
        out: dict[int, LeaderRecord] = {}
        for pp, row in zip(ids, rows, strict=True):
            rec = _record(pp, row)
            if rec is not None:
                out[pp] = rec
        return out

    async def epochs(self, pps: Iterable[int]) -> dict[int, int]:
        """pp -> leader epoch of the partitions that have a record (one round trip)."""
        ids = list(pps)
        async with self._client.pipeline(transaction=False) as pipe:
            for pp in ids:
                pipe.hget(self._keys.pp_leader(pp), "epoch")
            rows = await pipe.execute()
        return {pp: int(row) for pp, row in zip(ids, rows, strict=True) if row is not None}

    async def create(self, pp: int, replicas: Sequence[int]) -> LeaderRecord:
        if not replicas:
            raise ValueError("a partition needs at least one replica")
        ordered = json.dumps(list(dict.fromkeys(int(r) for r in replicas)))  # home node first
        rec = _record(pp, await run_durably(self._client, self._create, [self._keys.pp_leader(pp)], [ordered]))
        assert rec is not None
        return rec

    async def elect(
        self, pp: int, node: int, node_id: str, expected_epoch: int, *, force: bool = False,
        event: dict[str, Any] | None = None,
    ) -> LeaderRecord | None:
        """The new record when ``node`` now leads ``pp`` (see module doc), else None.
        ``event`` (forced elections only) is stored with ``epoch`` set to the new epoch."""
        stored = json.dumps({**(event or {}), "epoch": int(expected_epoch) + 1}) if force else ""
        flat = await run_durably(
            self._client, self._elect, [self._keys.pp_leader(pp)],
            [int(node), node_id, int(expected_epoch), "1" if force else "0", stored],
        )
        return _record(pp, flat) if flat else None

    async def set_isr(self, pp: int, node: int, epoch: int, isr: Iterable[int]) -> bool:
        """Replace the in-sync set; False when ``node`` no longer leads ``epoch``."""
        members = set(isr) | {int(node)}
        ok = await run_durably(self._client, self._set_isr, [self._keys.pp_leader(pp)], [int(node), int(epoch), _list(members)])
        return bool(ok)

    async def report_hw(self, pp: int, node: int, epoch: int, hw: int) -> bool:
        """Record the leader's high watermark; False when ``node`` no longer leads ``epoch``."""
        ok = await self._report_hw(keys=[self._keys.pp_leader(pp)], args=[int(node), int(epoch), int(hw)])
        return bool(ok)

    async def note_truncation(self, pp: int, epoch: int, node_id: str, count: int) -> bool:
        """Add ``count`` truncated offsets of ``node_id`` to the unclean election of ``epoch``."""
        ok = await self._note_truncation(keys=[self._keys.pp_leader(pp)], args=[int(epoch), node_id, int(count)])
        return bool(ok)
