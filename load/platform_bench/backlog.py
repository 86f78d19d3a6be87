"""Producing a benchmark backlog so that every key's messages are appended in order.

Message ``i`` of a backlog over ``keys`` keys is key ``i mod keys``, sequence number
``i // keys`` (:func:`load.platform_bench.measure.message_identity`). ``workers`` sender
tasks each own a disjoint set of keys (:func:`owner_of_key`) and send their messages in
index order, one request of at most ``batch`` messages at a time, so a key's messages
are appended in sequence order whatever the other senders do.

:func:`produce_ordered` is system-neutral: ``send(batch)`` appends one list of
``(key, payload)`` pairs durably and raises on failure (an SDK produce, a peer's
``System.produce``). Each acknowledged message is reported to ``on_acked(key, seq)``
(e.g. :meth:`load.checks.DeliveryChecker.expect`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence

from vpq.load.payload import make_payload
from vpq.load.platform_bench.measure import message_identity, owner_of_key

Send = Callable[[Sequence[tuple[str, bytes]]], Awaitable[object]]
OnAcked = Callable[[str, int], object]


async def produce_ordered(
    send: Send,
    count: int,
    keys: int,
    *,
    message_bytes: int,
    batch: int = 500,
    workers: int = 4,
    on_acked: OnAcked | None = None,
) -> float:
    """Produce ``count`` messages as the module docstring says; answers messages per
    second. ``ValueError`` for counts, keys, batch or workers below 1."""
    if count < 1 or keys < 1 or batch < 1 or workers < 1:
        raise ValueError("count, keys, batch and workers must be >= 1")
    workers = min(workers, keys)
    plans: list[list[int]] = [[] for _ in range(workers)]
    for i in range(count):
        plans[owner_of_key(i, keys, workers)].append(i)

    async def worker(indices: list[int]) -> None:
        for lo in range(0, len(indices), batch):
            idents = [message_identity(i, keys) for i in indices[lo : lo + batch]]
            await send([(k, make_payload(k, s, size=message_bytes)) for k, s in idents])
            if on_acked is not None:
                for k, s in idents:
                    on_acked(k, s)

    started = time.monotonic()
    await asyncio.gather(*(worker(p) for p in plans if p))
    elapsed = time.monotonic() - started
    return count / elapsed if elapsed > 0 else 0.0


def as_json_values(pairs: Sequence[tuple[str, bytes]]) -> list[dict[str, str]]:
    """``(key, ASCII payload)`` pairs as API produce messages with a JSON string value."""
    return [{"key": k, "value": p.decode("ascii")} for k, p in pairs]
