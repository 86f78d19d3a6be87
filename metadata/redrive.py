"""Redrive cursors of the dead-letter queues: how far each has been redriven.

A group's dead-letter queue is an ordinary queue, an append-only log; a message
"leaves" it when a redrive has delivered it to the group again. The cursor of a
dead-letter queue says, per physical partition, below which offset every record
of the queue has left (``read_nodes.redrive`` produces them back first, then
advances the cursor: at-least-once, never a loss).

Storage: ``{prefix}:redrive:{dlq}`` (``Keys.redrive``), hash ``"{queue_id}:{pp}"``
-> offset. Fields of another queue id (a dead-letter queue deleted and created
again under the same name) are ignored on read.

Contract:

- ``cursors(dlq, queue_id)`` -> ``{pp: offset}``, the pps never redriven absent.
- ``advance(dlq, queue_id, positions)`` moves each pp's cursor forward to the given
  offset, never back (one Lua script), so a late or repeated redrive cannot send
  messages back into the dead-letter queue.
- The key belongs to the dead-letter queue, not to the group: deleting the group
  keeps it (what left the dead-letter queue stays gone).
"""

from __future__ import annotations

from collections.abc import Mapping

import redis.asyncio as aioredis

from vpq.metadata.keys import Keys
from vpq.metadata.names import check_name

# KEYS: cursor hash ; ARGV: field, offset, field, offset, ...
_ADVANCE = """
for i = 1, #ARGV, 2 do
  local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '-1')
  if tonumber(ARGV[i + 1]) > cur then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 1
"""


class RedriveStore:
    """Redrive cursors (the caller owns the client)."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._advance = client.register_script(_ADVANCE)

    async def cursors(self, dlq: str, queue_id: int) -> dict[int, int]:
        raw = await self._client.hgetall(self._keys.redrive(check_name("queue", dlq)))
        prefix = f"{int(queue_id)}:"
        return {int(f[len(prefix):]): int(v) for f, v in raw.items() if f.startswith(prefix)}

    async def advance(self, dlq: str, queue_id: int, positions: Mapping[int, int]) -> None:
        args: list[str | int] = []
        for pp, offset in sorted(positions.items()):
            if int(pp) < 0 or int(offset) < 0:
                raise ValueError("pp and offset must be >= 0")
            args += [f"{int(queue_id)}:{int(pp)}", int(offset)]
        if args:
            await self._advance(keys=[self._keys.redrive(check_name("queue", dlq))], args=args)
