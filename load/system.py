"""The ``System`` protocol every benchmarked system implements (vpq and each peer).

A system is driven only through this interface, so each scenario runs the same code
against every system. Contract:

* ``start()`` connects (and starts a server the system owns, if any); it raises
  :class:`SystemUnavailable` with a readable reason when the server cannot be reached.
  ``stop()`` closes connections and stops owned servers; idempotent.
* ``setup(queues, ordered=..., shards=...)`` creates logical queues. ``ordered=True``
  asks for the system's best per-key-ordered construct; ``shards`` is how many
  key-hash shards a peer must pre-create per queue for ordered consumption by up to
  ``shards`` consumers (vpq ignores it: its virtual partitions do that job).
  ``register`` records the same layout without creating anything (for a second
  process that attaches to queues created elsewhere).
* ``produce(queue, batch)`` appends ``(key, payload)`` pairs in order and returns only
  once every message is acknowledged with the system's durability (``durability``
  says what that means). One call is one request / pipeline / confirm round.
  ``lanes`` > 1 spreads the messages over that many swimlanes by key where the system
  has lanes (vpq); peers ignore it.
* ``consume(queue, handler, ordered=..., member=i, members=n, batch=b)`` starts
  member ``i`` of ``n`` of the queue's single consumer group in the background. It
  calls ``await handler(key, payload)`` for each delivery, one at a time, and
  acknowledges a message after its handler returned. ``ordered=True``: messages of
  one key are handled in produce order across all members. Returns a handle whose
  ``stop()`` ends the member.
* ``count(queue)`` is how many messages the queue holds (``None`` when unknown);
  ``delete(queues)`` removes queues; ``teardown()`` removes everything ``setup``
  created; ``server_memory()`` reports the server's memory (bytes) as a dict.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import mmh3

Handler = Callable[[str, bytes], Awaitable[None]]
GROUP = "bench"


class SystemUnavailable(Exception):
    """The system's server cannot be reached or started; the message says why."""


@runtime_checkable
class ConsumerHandle(Protocol):
    async def stop(self) -> None: ...


@runtime_checkable
class System(Protocol):
    name: str
    durability: str

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def describe(self) -> dict[str, Any]: ...

    def register(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None: ...

    async def setup(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None: ...

    async def produce(self, queue: str, batch: Sequence[tuple[str, bytes]], *, lanes: int = 1) -> None: ...

    async def consume(
        self, queue: str, handler: Handler, *, ordered: bool, member: int = 0, members: int = 1, batch: int = 100
    ) -> ConsumerHandle: ...

    async def count(self, queue: str) -> int | None: ...

    async def delete(self, queues: Sequence[str]) -> None: ...

    async def teardown(self) -> None: ...

    async def server_memory(self) -> dict[str, int]: ...

    def attach_spec(self) -> dict[str, Any]: ...


def shard_of(key: str, shards: int) -> int:
    """The shard of ``key`` among ``shards`` (murmur3, like vpq's virtual partitions)."""
    if shards <= 1:
        return 0
    return mmh3.hash(key, signed=False) % shards


def owned_shards(member: int, members: int, shards: int) -> list[int]:
    """The shards member ``member`` of ``members`` reads in the peers' ordered construct:
    ``s`` with ``s % members == member`` (every shard has exactly one reader)."""
    if not 0 <= member < members:
        raise ValueError(f"member {member} not within 0..{members - 1}")
    return [s for s in range(shards) if s % members == member]
