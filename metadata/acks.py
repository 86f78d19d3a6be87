"""Persisted acknowledgement state per (queue, group, physical partition).

State: a low watermark ``lw`` (every offset below it is done: acked or
dead-lettered, or not the queue's) plus the set of offsets at or above ``lw``
that are acked out of order. The read node that owns the group computes both
(only it knows which offsets of the shared pp belong to the queue) and saves
snapshots; another read node taking the group over loads them.

``save(queue, group, pp, low_watermark, acked_above, fence_token)`` is one Lua
script that accepts the snapshot only when

1. ``fence_token`` is the token of the live lease on ``group_resource(queue,
   group)``: a read node that lost the group (lease expired and taken over, or
   released) can no longer write, whatever it still has in flight; and
2. the watermark does not go backwards (``low_watermark >= stored``): a late,
   reordered snapshot can never undo progress.

Otherwise it changes nothing and returns False (``save_status`` says which rule
refused it). Offsets below the watermark are dropped from ``acked_above``.

Bound: at most ``max_acked_above`` (default 10,000) out-of-order offsets per
snapshot. Beyond that ``save`` REFUSES with ``AckStateTooLargeError`` rather than
compacting, because compaction would need knowledge only the read node has. The
read node must keep its window of unacknowledged deliveries ahead of the
watermark small enough (stop handing out new messages of the partition while
the gap is that wide), which also bounds redelivery after a failover.

Encoding of one state (a hash field per pp): ``"lw|token|d1,d2,..."`` where the
deltas are ``first - lw`` then successive differences of the sorted offsets.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field

import redis.asyncio as aioredis

from vpq.metadata.errors import AckStateTooLargeError
from vpq.metadata.keys import Keys
from vpq.metadata.leases import group_resource

DEFAULT_MAX_ACKED_ABOVE = 10_000

# KEYS: acks hash, group lease ; ARGV: pp, lw, token, blob
_SAVE = """
if redis.call('HGET', KEYS[2], 'token') ~= ARGV[3] then return 0 end
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur then
  local clw, ctok = string.match(cur, '^(%d+)|(%d+)|')
  if tonumber(ARGV[3]) < tonumber(ctok) then return 0 end
  if tonumber(ARGV[2]) < tonumber(clw) then return -1 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
return 1
"""


class SaveStatus(enum.Enum):
    SAVED = 1
    FENCED = 0
    """the token is not the live group lease's (or older than the stored one)"""
    REGRESSED = -1
    """the watermark would go backwards"""


@dataclass(frozen=True, slots=True)
class AckState:
    low_watermark: int
    acked_above: list[int] = field(default_factory=list)
    fence_token: int = 0

    def is_acked(self, offset: int) -> bool:
        """True when ``offset`` is done according to this state."""
        if offset < self.low_watermark:
            return True
        i = bisect_left(self.acked_above, offset)
        return i < len(self.acked_above) and self.acked_above[i] == offset


def encode_state(low_watermark: int, acked_above: Iterable[int], token: int, maximum: int) -> tuple[str, list[int]]:
    """The stored form and the normalized (sorted, deduplicated, >= lw) offsets."""
    if not isinstance(low_watermark, int) or low_watermark < 0:
        raise ValueError(f"low_watermark must be an integer >= 0, got {low_watermark!r}")
    above = sorted({int(o) for o in acked_above if int(o) >= low_watermark})
    if len(above) > maximum:
        raise AckStateTooLargeError(len(above), maximum)
    deltas = []
    prev = low_watermark
    for o in above:
        deltas.append(o - prev)
        prev = o
    return f"{low_watermark}|{int(token)}|{','.join(map(str, deltas))}", above


def decode_state(raw: str) -> AckState:
    lw_s, tok_s, deltas_s = raw.split("|", 2)
    lw = int(lw_s)
    above: list[int] = []
    prev = lw
    if deltas_s:
        for d in deltas_s.split(","):
            prev += int(d)
            above.append(prev)
    return AckState(lw, above, int(tok_s))


class AckStore:
    """Ack snapshots over one shared client (the caller owns it)."""

    def __init__(self, client: aioredis.Redis, keys: Keys, max_acked_above: int = DEFAULT_MAX_ACKED_ABOVE) -> None:
        if max_acked_above < 0:
            raise ValueError("max_acked_above must be >= 0")
        self._client = client
        self._keys = keys
        self.max_acked_above = max_acked_above
        self._save = client.register_script(_SAVE)

    async def save_status(
        self, queue: str, group: str, pp: int, low_watermark: int, acked_above: Iterable[int], fence_token: int
    ) -> SaveStatus:
        """Store the snapshot if the fence and the watermark allow; see the module docstring."""
        blob, _ = encode_state(low_watermark, acked_above, fence_token, self.max_acked_above)
        k = self._keys
        res = await self._save(
            keys=[k.acks(queue, group), k.lease(group_resource(queue, group))],
            args=[int(pp), low_watermark, int(fence_token), blob],
        )
        return SaveStatus(int(res))

    async def save(
        self, queue: str, group: str, pp: int, low_watermark: int, acked_above: Iterable[int], fence_token: int
    ) -> bool:
        """True when stored; False when fenced off or the watermark would go backwards."""
        status = await self.save_status(queue, group, pp, low_watermark, acked_above, fence_token)
        return status is SaveStatus.SAVED

    async def load(self, queue: str, group: str, pp: int) -> AckState | None:
        """The saved state of one pp, None when none was ever saved."""
        raw = await self._client.hget(self._keys.acks(queue, group), str(int(pp)))
        return decode_state(raw) if raw is not None else None

    async def load_all(self, queue: str, group: str) -> dict[int, AckState]:
        """Every saved pp state of the group, by pp."""
        raw = await self._client.hgetall(self._keys.acks(queue, group))
        return {int(pp): decode_state(v) for pp, v in sorted(raw.items(), key=lambda kv: int(kv[0]))}

    async def delete_group(self, queue: str, group: str) -> None:
        await self._client.delete(self._keys.acks(queue, group))
