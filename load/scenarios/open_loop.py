"""Open-loop producing: message ``i`` is due at ``start + i / rate`` whatever happened to
the others, and its latency is measured from that due time.

``OpenLoopProducer.send(i, due)`` sends message ``i`` alone (batch 1) to one queue,
over ``keys`` keys (``i mod keys``). A message waits for the previous message of its
key to be acknowledged (per-key FIFO locks), so each key's produce order is its
schedule order; the wait counts in its latency, as it would for a real sender.
``run_open_loop`` starts every send as its own task at its due time. ``warm_up`` sends a
few unmeasured messages first (connections opened, caches warm) for every system alike.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from vpq.load.checks import DeliveryChecker
from vpq.load.payload import MESSAGE_BYTES, KeySequencer, key_name, make_payload
from vpq.load.stats import OpenLoopSchedule
from vpq.load.system import System

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 2000


async def run_open_loop(
    schedule: OpenLoopSchedule,
    send: Callable[[int, float], Awaitable[None]],
    lead_s: float = 0.05,
    stop: asyncio.Event | None = None,
) -> tuple[float, float]:
    """Start ``send(i, due)`` at each due time of ``schedule`` (no more once ``stop`` is set)
    and wait for all of them. Answers (start, end) on the ``time.monotonic`` clock: the
    first due time and when the last send ended."""
    start = time.monotonic() + lead_s
    tasks: list[asyncio.Task[None]] = []
    for i, offset in enumerate(schedule.offsets()):
        if stop is not None and stop.is_set():
            break
        due = start + offset
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(send(i, due)))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception):
            log.warning("open-loop send failed: %r", result)
    return start, time.monotonic()


WARM_UP_MESSAGES = 200


async def warm_up(system: System, queue: str, checker: DeliveryChecker, message_bytes: int = MESSAGE_BYTES) -> None:
    """Send ``WARM_UP_MESSAGES`` batch-1 messages (16 at a time, keys ``warm-*``), expected
    by ``checker`` like any other, before a measured phase."""
    seqs = KeySequencer()

    async def one(j: int) -> None:
        key = f"warm-{j}"
        for _ in range(WARM_UP_MESSAGES // 16):
            seq = seqs.next(key)
            await system.produce(queue, [(key, make_payload(key, seq, size=message_bytes))])
            checker.expect(key, seq)

    await asyncio.gather(*(one(j) for j in range(16)))


class OpenLoopProducer:
    """Batch-1 sends to ``queue`` for :func:`run_open_loop` (see the module docstring).

    ``base`` is the loop-clock origin of the payloads' ``sched_us``. Acknowledged
    messages go to ``checker.expect``; ``samples`` holds (due time, acknowledgement time
    minus due time) per acknowledged message (seconds, ``time.monotonic`` clock),
    ``due_of`` the due time per message.
    """

    def __init__(
        self,
        system: System,
        queue: str,
        checker: DeliveryChecker,
        *,
        keys: int,
        base: float,
        message_bytes: int = MESSAGE_BYTES,
        seqs: KeySequencer | None = None,
    ) -> None:
        self._system = system
        self._queue = queue
        self._checker = checker
        self._keys = keys
        self._base = base
        self._bytes = message_bytes
        self._seqs = seqs or KeySequencer()
        self._locks = [asyncio.Lock() for _ in range(keys)]
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.samples: list[tuple[float, float]] = []
        self.due_of: dict[tuple[str, int], float] = {}
        self.errors: list[str] = []

    @property
    def ack_latency(self) -> list[float]:
        return [latency for _due, latency in self.samples]

    async def send(self, i: int, due: float) -> None:
        key = key_name(i % self._keys)
        async with self._in_flight, self._locks[i % self._keys]:
            seq = self._seqs.next(key)
            payload = make_payload(key, seq, int((due - self._base) * 1e6), size=self._bytes)
            try:
                await self._system.produce(self._queue, [(key, payload)])
            except Exception as exc:  # counted; the message is not expected
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                return
            self.samples.append((due, time.monotonic() - due))
            self.due_of[(key, seq)] = due
            self._checker.expect(key, seq)
