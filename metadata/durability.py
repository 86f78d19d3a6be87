"""Changes that must not be lost wait for a Redis replica's acknowledgement.

Redis replication is asynchronous: the master answers a write before any replica has
it, so a failover (Sentinel promoting a replica after the master died) loses the
writes the replica had not received yet. For most of vpq's metadata that is harmless
(ack state and offsets going back a little means redelivery, which at-least-once
allows). A few changes must survive a failover because other components act on them
at once and an older copy would let two of them disagree: a new placement-map epoch,
a partition leadership change (``elect``, the in-sync set), a queue's record, a lease
grant (its fencing token). Their writers run them through ``run_durably``.

Contract of ``run_durably(client, script, keys, args)``:

- when the master has no online replica (a single Redis, or a replica not yet
  synchronised; the count comes from ``INFO replication`` and is cached for
  ``replica_check_s``), the script runs as usual: nothing waits;
- otherwise the script and ``WAIT 1 <replica_wait_ms>`` go in one pipeline on one
  connection (``WAIT`` counts the replicas that have that connection's writes), so
  the call returns only once a replica has the change in memory;
- when no replica acknowledges within ``replica_wait_ms`` the replica count is read
  again: when the master has no online replica any more (it left; or the connection
  now reaches a newly promoted master), the call succeeds as in the first case.
  Otherwise the change is still in effect on the master, but the call raises
  ``ReplicaNotAcknowledged`` (a ``MetadataUnavailable``: retryable, HTTP 503), the
  waiter's ``timeouts`` counter grows and a warning is logged. Failing is the safer
  answer: the caller treats it like Redis being unreachable and retries, and every
  script run this way is idempotent (a retry finds its own change and waits again),
  whereas reporting success would let it act on a change a failover may still undo.
  A replica that stays unreachable is dropped by the master after ``repl-timeout``
  (60 s by default): from then on nothing waits until it is back.

The cached count is dropped whenever a command of the client fails with a connection
error (``metadata.connection``), so after a failover it is read from the new master.
Clients that are not ``MetadataClient`` (no ``replica_waiter``) just run the script.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from vpq.metadata.errors import MetadataUnavailable

log = logging.getLogger(__name__)


class ReplicaNotAcknowledged(MetadataUnavailable):
    """A change is in effect on the Redis master but no replica acknowledged it in time."""


def online_replicas(info: dict[str, Any]) -> int:
    """Replicas in state ``online`` in an ``INFO replication`` answer (as redis-py parses
    it: ``slave0`` is a dict), 0 on a replica or with none."""
    if info.get("role") != "master":
        return 0
    count = 0
    for i in range(int(info.get("connected_slaves", 0) or 0)):
        entry = info.get(f"slave{i}")
        if isinstance(entry, dict) and entry.get("state") == "online":
            count += 1
    return count


class ReplicaWaiter:
    """The policy state of one client: the cached replica count and the timeout counter."""

    def __init__(self, wait_ms: int, check_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        if wait_ms < 1:
            raise ValueError("wait_ms must be >= 1")
        self.wait_ms = wait_ms
        self._check_s = check_s
        self._clock = clock
        self._count: int | None = None
        self._checked_at = 0.0
        self.timeouts = 0
        self.waits = 0

    def cached(self) -> int | None:
        """The replica count when it was read less than ``check_s`` ago, else None."""
        if self._count is None or self._clock() - self._checked_at >= self._check_s:
            return None
        return self._count

    def remember(self, count: int) -> None:
        self._count = count
        self._checked_at = self._clock()

    def forget(self) -> None:
        self._count = None

    async def replicas(self, client: Any) -> int:
        count = self.cached()
        if count is None:
            try:
                count = online_replicas(await client.info("replication"))
            except MetadataUnavailable:
                self.forget()
                raise
            self.remember(count)
        return count


async def run_durably(client: Any, script: Any, keys: Sequence[Any], args: Sequence[Any]) -> Any:
    """Run the registered ``script``; see the module docstring for when it waits."""
    waiter: ReplicaWaiter | None = getattr(client, "replica_waiter", None)
    if waiter is None or await waiter.replicas(client) == 0:
        return await script(keys=keys, args=args)
    try:
        async with client.pipeline(transaction=False) as pipe:
            await script(keys=keys, args=args, client=pipe)
            pipe.execute_command("WAIT", 1, waiter.wait_ms)
            result, acked = await pipe.execute()
    except MetadataUnavailable:
        waiter.forget()
        raise
    waiter.waits += 1
    if int(acked) < 1:
        waiter.forget()
        if await waiter.replicas(client) == 0:
            return result  # the replica left (or this is a new master after a failover)
        waiter.timeouts += 1
        log.warning("no Redis replica acknowledged a metadata change within %d ms", waiter.wait_ms)
        raise ReplicaNotAcknowledged(f"no Redis replica acknowledged the change within {waiter.wait_ms} ms")
    return result
