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
  up again). ``force=True`` (an operator's unclean election) skips the in-sync check and
  sets the in-sync set to ``[node]``.
- ``set_isr(pp, node, epoch, isr)``: only the leader of the current epoch changes the
  in-sync set (always containing itself).

Every script is idempotent for the same arguments (a retried ``elect`` that already
succeeded answers the record it wrote), as ``metadata.connection`` requires. Every
change waits for a Redis replica's acknowledgement when the master has one
(``metadata.durability``): a leader epoch undone by a failover could be won twice.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vpq.metadata.durability import run_durably
from vpq.metadata.keys import Keys

_CREATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'leader', -1, 'leader_id', '', 'epoch', 0, 'replicas', ARGV[1], 'isr', ARGV[1])
end
return redis.call('HGETALL', KEYS[1])
"""

# ARGV: node, node_id, expected epoch, force (0|1)
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
elseif not member then
  return false
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


@dataclass(frozen=True, slots=True)
class LeaderRecord:
    pp: int
    leader: int  # write-node index, -1 before the first election
    leader_id: str
    epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


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
    )


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

    async def create(self, pp: int, replicas: Sequence[int]) -> LeaderRecord:
        if not replicas:
            raise ValueError("a partition needs at least one replica")
        ordered = json.dumps(list(dict.fromkeys(int(r) for r in replicas)))  # home node first
        rec = _record(pp, await run_durably(self._client, self._create, [self._keys.pp_leader(pp)], [ordered]))
        assert rec is not None
        return rec

    async def elect(self, pp: int, node: int, node_id: str, expected_epoch: int, *, force: bool = False) -> LeaderRecord | None:
        """The new record when ``node`` now leads ``pp`` (see module doc), else None."""
        flat = await run_durably(
            self._client, self._elect, [self._keys.pp_leader(pp)],
            [int(node), node_id, int(expected_epoch), "1" if force else "0"],
        )
        return _record(pp, flat) if flat else None

    async def set_isr(self, pp: int, node: int, epoch: int, isr: Iterable[int]) -> bool:
        """Replace the in-sync set; False when ``node`` no longer leads ``epoch``."""
        members = set(isr) | {int(node)}
        ok = await run_durably(self._client, self._set_isr, [self._keys.pp_leader(pp)], [int(node), int(epoch), _list(members)])
        return bool(ok)
