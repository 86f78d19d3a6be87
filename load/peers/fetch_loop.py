"""The consume loop the peer drivers share: fetch a batch, handle it one message at a
time, acknowledge it, repeat, until stopped.

``FetchLoop`` is the :class:`load.system.ConsumerHandle` the peers return. A fetch or
ack failure is counted in ``errors``, logged, and retried after a short pause (the loop
ends only on ``stop()``); a handler failure ends the loop (it is a harness bug).
``Inbox`` turns push deliveries (callbacks, per-shard fetch tasks) into batch fetches,
keeping arrival order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from vpq.load.system import Handler

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0
ERROR_PAUSE_S = 0.1


@dataclass(slots=True)
class Delivery:
    """One delivered message; ``token`` is what the driver needs to acknowledge it."""

    key: str
    payload: bytes
    token: Any


Fetch = Callable[[int, float], Awaitable[Sequence[Delivery]]]
Ack = Callable[[Sequence[Delivery]], Awaitable[None]]
Close = Callable[[], Awaitable[None]]


class FetchLoop:
    """One consumer-group member run as a background task (see the module docstring)."""

    def __init__(
        self,
        fetch: Fetch,
        ack: Ack,
        handler: Handler,
        batch: int,
        *,
        close: Close | None = None,
        wait_s: float = 0.2,
        name: str = "member",
    ) -> None:
        self._fetch = fetch
        self._ack = ack
        self._handler = handler
        self._batch = batch
        self._close = close
        self._wait_s = wait_s
        self._name = name
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self.handled = 0
        self.errors = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"fetch-loop-{self._name}")

    async def _run(self) -> None:
        while not self._stopping:
            try:
                got = await self._fetch(self._batch, self._wait_s)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.errors += 1
                log.warning("%s: fetch failed: %r", self._name, exc)
                await asyncio.sleep(ERROR_PAUSE_S)
                continue
            if not got:
                continue
            for delivery in got:
                await self._handler(delivery.key, delivery.payload)
                self.handled += 1
            try:
                await self._ack(got)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.errors += 1
                log.warning("%s: ack failed: %r", self._name, exc)

    async def stop(self) -> None:
        """End the loop (after the batch in hand, at most ``STOP_TIMEOUT_S``) and close."""
        self._stopping = True
        if self._task is not None:
            done, _ = await asyncio.wait({self._task}, timeout=STOP_TIMEOUT_S)
            if not done:
                self._task.cancel()
            results = await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            for result in results:
                if isinstance(result, Exception):
                    log.warning("%s ended with %r", self._name, result)
        if self._close is not None:
            close, self._close = self._close, None
            await close()


class Inbox:
    """A FIFO of deliveries pushed by callbacks or feeder tasks, fetched in batches."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Delivery] = asyncio.Queue()

    def put(self, delivery: Delivery) -> None:
        self._queue.put_nowait(delivery)

    def __len__(self) -> int:
        return self._queue.qsize()

    async def fetch(self, max_n: int, wait_s: float) -> list[Delivery]:
        """Up to ``max_n`` deliveries, waiting up to ``wait_s`` for the first one."""
        if self._queue.empty():
            try:
                first = await asyncio.wait_for(self._queue.get(), wait_s)
            except TimeoutError:
                return []
        else:
            first = self._queue.get_nowait()
        out = [first]
        while len(out) < max_n and not self._queue.empty():
            out.append(self._queue.get_nowait())
        return out
