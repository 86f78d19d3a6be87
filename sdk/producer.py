"""``Producer``: batches ``send`` calls into produce requests (aiokafka style).

Contract:

* ``await producer.send(queue, value, key=...)`` serialises the message at once (a value
  JSON cannot hold raises ``TypeError`` there) and returns an ``asyncio.Future`` that
  resolves to a :class:`ProduceResult` only after the gateway answered 200, i.e. once the
  message is durable; or to the error that made it fail for good.
* Messages are gathered per queue (the accumulator) and sent by one background sender
  task when a batch is full (``max_batch`` messages or ``max_batch_bytes``), when the
  oldest waiting message is ``linger_ms`` old, or on ``flush()``/``stop()``.
* **Order.** At most one batch per queue is in flight. A batch that fails with a
  retryable error is retried (pacing from the client's ``RetryPolicy``, for up to
  ``delivery_timeout_ms``) before any later message of that queue is sent, so retries
  never reorder messages of a queue, and hence never reorder a key. Different queues
  proceed in parallel, up to ``max_in_flight`` requests overall.
* A batch rejected because of one message (400/413 naming its ``index``) fails only that
  message; the rest (never appended: batches are all or nothing) are sent again in order.
  A batch refused as too large without an index is split in halves, sent in order.
  Any other final error fails every message of the batch.
* **Retries are safe.** Every message gets a ``dedup_id`` when ``send`` serialises it
  (the caller's, else one of the client's ``dedup_ids``: a per-client random prefix and
  a sequence number), and every retry resends the same serialised message: within the
  queue's ``dedup_window_ms`` a batch whose answer was lost (a timeout, a write node
  killed, Redis frozen) is stored once, and the retry's answer gives the stored ids.
  With a client built with ``dedup=False`` the producer adds no ids (at-least-once).
* ``send`` waits while ``max_buffered`` messages are already waiting (backpressure).
* ``stop()`` (or leaving ``async with``) sends everything buffered, waits for the
  answers and then ends the sender; ``send`` afterwards raises :class:`ClientClosedError`.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from vpq.sdk.client import AsyncClient
from vpq.sdk.errors import ClientClosedError, VpqClientError
from vpq.sdk.models import ProduceMessage, ProduceResult, dump_message

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Pending:
    encoded: bytes
    future: asyncio.Future[ProduceResult]
    enqueued_at: float


@dataclass(eq=False)
class _QueueBuffer:
    pending: deque[_Pending] = field(default_factory=deque)
    nbytes: int = 0
    in_flight: bool = False


def _bad_index(err: VpqClientError, size: int) -> int | None:
    """The index of the message a 400/413 blames, when the server named a valid one."""
    if err.status not in (400, 413):
        return None
    idx = err.details.get("index")
    if isinstance(idx, int) and not isinstance(idx, bool) and 0 <= idx < size:
        return idx
    return None


class Producer:
    """Batching, order-keeping producer on top of an :class:`AsyncClient` (not owned)."""

    def __init__(
        self,
        client: AsyncClient,
        linger_ms: float = 5,
        max_batch: int = 500,
        max_in_flight: int = 8,
        *,
        max_batch_bytes: int = 4 * 1024 * 1024,
        max_buffered: int = 100_000,
        delivery_timeout_ms: float = 120_000,
    ) -> None:
        if max_batch < 1 or max_in_flight < 1 or max_buffered < 1 or max_batch_bytes < 1:
            raise ValueError("max_batch, max_in_flight, max_buffered and max_batch_bytes must be >= 1")
        if linger_ms < 0 or delivery_timeout_ms < 0:
            raise ValueError("linger_ms and delivery_timeout_ms must be >= 0")
        self._client = client
        self._linger = linger_ms / 1000.0
        self._max_batch = max_batch
        self._max_batch_bytes = max_batch_bytes
        self._max_in_flight = max_in_flight
        self._max_buffered = max_buffered
        self._delivery_timeout = delivery_timeout_ms / 1000.0
        self._buffers: OrderedDict[str, _QueueBuffer] = OrderedDict()
        self._buffered = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()
        self._flushing = 0
        self._closed = False
        self._sender: asyncio.Task[None] | None = None
        self.requests_sent = 0

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Start the background sender (``send`` also starts it on first use)."""
        if self._closed:
            raise ClientClosedError("the producer is stopped")
        if self._sender is None:
            self._sender = asyncio.create_task(self._run(), name="vpq-producer-sender")

    async def stop(self) -> None:
        """Flush everything buffered, wait for the answers, end the sender. Idempotent."""
        if self._closed:
            if self._sender is not None:
                await asyncio.shield(self._sender)
            return
        self._closed = True
        if self._sender is None:
            return
        await self.flush()
        self._wake.set()
        await self._sender

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    @property
    def buffered(self) -> int:
        """Messages accepted by ``send`` whose batch has not been answered yet."""
        return self._buffered

    # -- sending -----------------------------------------------------------------------

    async def send(
        self,
        queue: str,
        value: Any = None,
        *,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
        lane: str | None = None,
        env: str | None = None,
        set: str | None = None,  # noqa: A002 - the API's name
        dedup_id: str | None = None,
    ) -> asyncio.Future[ProduceResult]:
        """Queue one message; the returned future resolves once it is durable."""
        if self._closed:
            raise ClientClosedError("the producer is stopped")
        ids = self._client.dedup_ids
        if dedup_id is None and ids is not None:
            dedup_id = ids.next()
        encoded = dump_message(
            ProduceMessage(value=value, key=key, headers=headers, lane=lane, env=env, set=set, dedup_id=dedup_id)
        )
        if self._sender is None:
            await self.start()
        while self._buffered >= self._max_buffered:
            self._space.clear()
            await self._space.wait()
            if self._closed:
                raise ClientClosedError("the producer is stopped")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[ProduceResult] = loop.create_future()
        buf = self._buffers.get(queue)
        if buf is None:
            buf = self._buffers[queue] = _QueueBuffer()
        buf.pending.append(_Pending(encoded, fut, loop.time()))
        buf.nbytes += len(encoded) + 1
        self._buffered += 1
        self._wake.set()
        return fut

    async def send_and_wait(
        self,
        queue: str,
        value: Any = None,
        *,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
        lane: str | None = None,
        env: str | None = None,
        set: str | None = None,  # noqa: A002
        dedup_id: str | None = None,
    ) -> ProduceResult:
        """``send`` and wait until the message is durable."""
        fut = await self.send(queue, value, key=key, headers=headers, lane=lane, env=env, set=set, dedup_id=dedup_id)
        return await fut

    async def flush(self) -> None:
        """Send everything buffered now (ignoring linger) and wait for all the answers.
        Failed messages do not raise here; their futures hold the errors."""
        futures = [p.future for buf in self._buffers.values() for p in buf.pending]
        futures += [t for t in self._tasks]
        if not futures:
            return
        self._flushing += 1
        self._wake.set()
        try:
            await asyncio.gather(*futures, return_exceptions=True)
        finally:
            self._flushing -= 1

    # -- the sender --------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._wake.clear()
                now = loop.time()
                next_due = self._dispatch_ready(now)
                if self._closed and self._buffered == 0 and not self._tasks:
                    return
                timeout = None if next_due is None else max(0.0, next_due - now)
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except TimeoutError:
                    pass
        except BaseException as exc:
            self._fail_everything(exc)
            raise

    def _dispatch_ready(self, now: float) -> float | None:
        """Start a request for every queue whose batch is ready; answer the next linger deadline."""
        next_due: float | None = None
        hurry = self._flushing > 0 or self._closed
        for queue in list(self._buffers):
            buf = self._buffers[queue]
            if buf.in_flight:
                continue
            if not buf.pending:
                del self._buffers[queue]
                continue
            due = buf.pending[0].enqueued_at + self._linger
            full = len(buf.pending) >= self._max_batch or buf.nbytes >= self._max_batch_bytes
            if not (hurry or full or due <= now):
                next_due = due if next_due is None else min(next_due, due)
                continue
            if len(self._tasks) >= self._max_in_flight:
                break  # woken again when a request completes
            batch = self._take_batch(buf)
            buf.in_flight = True
            self._buffers.move_to_end(queue)  # round-robin between queues
            task = asyncio.create_task(self._send_batch(queue, buf, batch))
            self._tasks.add(task)
        return next_due

    def _take_batch(self, buf: _QueueBuffer) -> list[_Pending]:
        batch: list[_Pending] = []
        size = 0
        while buf.pending and len(batch) < self._max_batch:
            nxt = len(buf.pending[0].encoded) + 1
            if batch and size + nxt > self._max_batch_bytes:
                break
            item = buf.pending.popleft()
            batch.append(item)
            size += nxt
            buf.nbytes -= nxt
        return batch

    async def _send_batch(self, queue: str, buf: _QueueBuffer, batch: list[_Pending]) -> None:
        try:
            await self._deliver(queue, batch)
        except Exception as exc:  # a bug or an unexpected answer: fail the batch, keep running
            for item in batch:
                _settle(item, exc=exc)
        finally:
            buf.in_flight = False
            self._buffered -= len(batch)
            if self._buffered < self._max_buffered:
                self._space.set()
            task = asyncio.current_task()
            if task is not None:
                self._tasks.discard(task)  # type: ignore[arg-type]
            self._wake.set()

    async def _deliver(self, queue: str, items: list[_Pending]) -> None:
        """Send ``items`` in order until each is stored or failed for good."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._delivery_timeout
        retry = 0
        while items:
            items = [i for i in items if not i.future.cancelled()]
            if not items:
                return
            try:
                self.requests_sent += 1
                results = await self._client.produce_encoded(queue, [i.encoded for i in items])
            except VpqClientError as err:
                if err.retryable and loop.time() < deadline:
                    retry += 1
                    delay = self._client.retry.delay(retry, err.retry_after)
                    log.warning("produce to %s failed (%s); retrying in %.3fs", queue, err, delay)
                    await asyncio.sleep(min(delay, max(0.0, deadline - loop.time())))
                    continue
                bad = _bad_index(err, len(items))
                if bad is not None:
                    _settle(items[bad], exc=err)
                    items = items[:bad] + items[bad + 1 :]
                    continue
                if err.status == 413 and len(items) > 1:
                    half = len(items) // 2
                    await self._deliver(queue, items[:half])
                    items = items[half:]
                    continue
                for item in items:
                    _settle(item, exc=err)
                return
            for item, result in zip(items, results):
                _settle(item, result=result)
            return

    def _fail_everything(self, exc: BaseException) -> None:
        err = exc if isinstance(exc, Exception) else ClientClosedError("the producer was cancelled")
        for buf in self._buffers.values():
            for item in buf.pending:
                _settle(item, exc=err)
            buf.pending.clear()
        self._buffers.clear()
        for task in self._tasks:
            task.cancel()
        self._space.set()


def _settle(item: _Pending, result: ProduceResult | None = None, exc: BaseException | None = None) -> None:
    if item.future.done():
        return
    if exc is not None:
        item.future.set_exception(exc)
    else:
        item.future.set_result(result)  # type: ignore[arg-type]
