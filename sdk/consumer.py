"""``Consumer``: the join / long-poll / handle / ack loop of one group member.

Contract:

* ``run()`` joins the group, then long-polls (``max_messages``, ``wait_ms``) and calls the
  async ``handler`` once per message, up to ``concurrency`` at a time. The server never
  hands one consumer two unacked messages of the same key (queue ordering ``key``), so
  handling a poll batch concurrently keeps per-key order.
* ``auto_ack=True``: a message whose handler returned is acked; one whose handler raised is
  nacked, delayed by ``RetryLater.delay_ms`` when the handler raised :class:`RetryLater`,
  else by ``nack_delay_ms``. Acks/nacks are batched and sent at the latest at the end of
  each poll batch (or every ``ack_interval_ms`` while a batch is handled). Acks still
  pending when a poll is sent go with it (the poll's ``ack`` field: acknowledged before
  the poll takes messages). Prefetching, a batch's acks do not go alone at its end when
  the loop sends the next poll at once (the prefetched answer is in, or comes within
  ``ack_interval_ms``; nothing else is pending): they go with that poll, so a busy
  consumer sends one request per batch. A poll carrying acks that fails or is cancelled
  gives them back to be sent again (acking twice is harmless).
  ``auto_ack=False``: the handler settles messages itself with :meth:`Consumer.ack` /
  :meth:`Consumer.nack`; an exception is only logged and the visibility timeout redelivers.
* ``prefetch=True`` (the default, like Kafka's fetcher): as soon as a batch arrives the next
  poll is sent, so it travels while the batch is handled, and acks/nacks go out in the
  background (at most one settlement request in flight, in order). When a full batch
  (``max_messages``) was handled in less than half the time the last prefetch took to
  be answered, the consumer keeps one more poll ahead (up to ``MAX_POLLS_AHEAD``); after
  a batch that was not full, or handled in more time than that prefetch took, one fewer
  (never fewer than one). So a consumer catching up on a backlog keeps the read node
  busy, while one whose handler sets the pace, or that has caught up, holds only the next
  batch (each batch held keeps its keys from the other members). A prefetch does
  not wait on the server (``wait_ms`` 0: it must never hold back the acks riding on the
  poll after it); when it comes back empty, the loop long-polls once the batch is done.
  Per-key order still holds: the server does not deliver a key's next message while its previous one is
  unacked, so a prefetched batch only holds other keys (or the same keys once acked).
  A prefetched batch not yet handled at ``stop()`` is given back by the leave (its
  messages go to the other members at once; their ``delivery_count`` shows that
  delivery, and it counts towards ``max_deliveries``).
  Prefetched batches are in flight while the current one is handled: when handling a batch
  may take longer than the queue's visibility timeout, use ``prefetch=False`` (polls only
  after the batch's settlements were answered) to avoid redeliveries.
* Poll is the heartbeat. While a long batch is being handled, a keep-alive poll
  (``max_messages=1``, no wait) is sent every third of ``session_timeout_ms``; what it
  returns is handled after the current batch.
* A consumer the server forgot (404 on poll, e.g. after a session timeout) joins again.
  Retryable failures that outlast the client's retries are logged and retried after
  ``error_backoff_ms``; other errors end ``run()`` with the exception.
* ``stop()`` (or cancelling ``run()``): no new handler starts, running handlers finish
  (``stop``) or are cancelled (cancel), pending acks are sent, then the consumer leaves,
  so its unacked messages go to the other members at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from time import monotonic
from typing import Any

from vpq.sdk.client import AsyncClient
from vpq.sdk.errors import NotFoundError, VpqClientError
from vpq.sdk.models import JoinResult, Message

log = logging.getLogger(__name__)

Handler = Callable[[Message], Awaitable[Any]]

MAX_POLLS_AHEAD = 2
"""Most polls a prefetching consumer has in flight while it handles a batch."""

MAX_REJOINS = 3


class RetryLater(Exception):
    """Raise from a handler to nack the message with a specific delay."""

    def __init__(self, delay_ms: int = 0, reason: str = "") -> None:
        super().__init__(reason or f"retry in {delay_ms} ms")
        self.delay_ms = delay_ms


class Consumer:
    """One member of ``group`` on ``queue``, driving ``handler``. The client is not owned."""

    def __init__(
        self,
        client: AsyncClient,
        queue: str,
        group: str,
        handler: Handler,
        *,
        consumer_id: str | None = None,
        lane: str | None = None,
        env: str | None = None,
        set: str | None = None,  # noqa: A002 - the API's name
        start: str | None = None,
        max_messages: int = 100,
        wait_ms: int = 5000,
        concurrency: int = 1,
        auto_ack: bool = True,
        nack_delay_ms: int = 0,
        ack_interval_ms: int | None = None,
        error_backoff_ms: int = 1000,
        prefetch: bool = True,
    ) -> None:
        if concurrency < 1 or max_messages < 1 or wait_ms < 0:
            raise ValueError("concurrency and max_messages must be >= 1, wait_ms >= 0")
        self._client = client
        self.queue = queue
        self.group = group
        self._handler = handler
        self._requested_id = consumer_id
        self._lane, self._env, self._set, self._start = lane, env, set, start
        self._max_messages = max_messages
        self._wait_ms = wait_ms
        self._concurrency = concurrency
        self._auto_ack = auto_ack
        self._nack_delay_ms = nack_delay_ms
        if ack_interval_ms is None:
            ack_interval_ms = 500
        self._ack_interval = ack_interval_ms / 1000.0
        self._error_backoff = error_backoff_ms / 1000.0
        self._prefetch = prefetch
        self._prefetched: deque[asyncio.Task[list[Message]]] = deque()  # polls ahead, oldest first
        self._ahead = 1  # how many polls to keep ahead (1..MAX_POLLS_AHEAD)
        self._prefetch_s: float | None = None  # how long the last answered prefetch took
        self._settling: asyncio.Task[None] | None = None
        self._flush_wanted = False  # a flush asked for and not yet taken by the sender
        self._join: JoinResult | None = None
        self._joined = asyncio.Event()
        self._stopping = False
        self._poll_task: asyncio.Task[list[Message]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._backlog: deque[Message] = deque()
        self._acks: list[str] = []
        self._nacks: dict[int, list[str]] = {}
        self._last_flush = 0.0
        self.handled = 0
        self.failed = 0

    @property
    def consumer_id(self) -> str | None:
        """The id the server gave (or confirmed) at the last join; ``None`` before joining."""
        return self._join.consumer_id if self._join else None

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        """Run the loop in a background task; returns once joined (join errors raise here)."""
        if self._task is not None:
            return
        self._task = asyncio.create_task(self.run(), name=f"vpq-consumer-{self.queue}-{self.group}")
        joined = asyncio.create_task(self._joined.wait())
        try:
            await asyncio.wait({self._task, joined}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            joined.cancel()
        if self._task.done():
            self._task.result()

    async def stop(self, timeout_s: float | None = None) -> None:
        """Finish running handlers, send pending acks, leave. After ``timeout_s`` the loop is cancelled."""
        self._stopping = True
        for task in (self._poll_task, *self._prefetched):
            if task is not None:
                task.cancel()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
        except TimeoutError:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def run(self) -> None:
        """Join, then poll and handle until ``stop()`` or cancellation; always leaves at the end."""
        await self._do_join()
        rejoins = 0
        try:
            while not self._stopping:
                if self._backlog:
                    batch = list(self._backlog)
                    self._backlog.clear()
                    await self._handle_batch(batch)
                    continue
                try:
                    messages = await self._poll()
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if self._stopping and task is not None and not task.cancelling():
                        break
                    raise
                except NotFoundError:
                    rejoins += 1
                    if rejoins > MAX_REJOINS:
                        raise
                    log.warning("consumer %s unknown to the server; joining again", self.consumer_id)
                    await self._drop_prefetched()  # sent for the forgotten member
                    await self._do_join()
                    continue
                except VpqClientError as err:
                    if not err.retryable:
                        raise
                    log.warning("poll failed (%s); retrying in %.1fs", err, self._error_backoff)
                    await asyncio.sleep(self._error_backoff)
                    continue
                rejoins = 0
                if messages:
                    if self._prefetch and not self._stopping:
                        while len(self._prefetched) < self._ahead:
                            self._prefetched.append(self._send_prefetch())
                    await self._handle_batch(messages)
        finally:
            await self._shutdown()

    # -- manual settlement (auto_ack=False) --------------------------------------------

    async def ack(self, *messages: Message) -> int:
        """Acknowledge messages now."""
        return await self._client.ack(self.queue, self.group, self._require_id(), [m.id for m in messages])

    async def nack(self, *messages: Message, delay_ms: int = 0) -> int:
        """Give messages back now, for delivery again after ``delay_ms``."""
        return await self._client.nack(
            self.queue, self.group, self._require_id(), [m.id for m in messages], delay_ms=delay_ms
        )

    def _require_id(self) -> str:
        if self._join is None:
            raise RuntimeError("the consumer has not joined")
        return self._join.consumer_id

    # -- internals ---------------------------------------------------------------------

    async def _do_join(self) -> None:
        wanted = self._join.consumer_id if self._join else self._requested_id
        self._join = await self._client.join(
            self.queue, self.group, consumer_id=wanted, lane=self._lane, env=self._env, set=self._set, start=self._start
        )
        self._last_flush = monotonic()  # ack_interval_ms counts from here
        self._joined.set()

    async def _poll_request(self, wait_ms: int | None = None) -> list[Message]:
        """A poll carrying the acks pending now; given back when it fails or is cancelled."""
        cid = self._require_id()
        acks, self._acks = self._acks, []
        if acks:
            self._last_flush = monotonic()
        wait = self._wait_ms if wait_ms is None else wait_ms
        try:
            return await self._client.poll(
                self.queue, self.group, cid, max_messages=self._max_messages, wait_ms=wait, ack=acks or None
            )
        except BaseException:
            if acks:
                self._acks[:0] = acks
            raise

    def _send_prefetch(self) -> asyncio.Task[list[Message]]:
        """A poll ahead (no wait on the server); its round trip is kept in ``_prefetch_s``."""
        loop = asyncio.get_running_loop()
        sent = loop.time()
        task = asyncio.ensure_future(self._poll_request(wait_ms=0))

        def answered(t: asyncio.Task[list[Message]]) -> None:
            if not t.cancelled() and t.exception() is None:
                self._prefetch_s = loop.time() - sent

        task.add_done_callback(answered)
        return task

    def _adapt_polls_ahead(self, handled_s: float, full: bool) -> None:
        """At a batch's end (``full``: it had ``max_messages``; it took ``handled_s``): see
        the module docstring."""
        took = self._prefetch_s
        if took is None:
            return
        if full and took > 2 * handled_s:
            self._ahead = min(MAX_POLLS_AHEAD, self._ahead + 1)
        elif not full or took < handled_s:
            self._ahead = max(1, self._ahead - 1)

    async def _next_poll_soon(self) -> bool:
        """True when the loop will send the next poll right away: prefetching, nothing
        else queued, and the prefetched answer (never a long poll) is in, or comes
        within ``ack_interval_ms`` (the loop waits for it anyway)."""
        task = self._prefetched[0] if self._prefetched else None
        if not self._prefetch or self._stopping or self._backlog or self._nacks or task is None:
            return False
        if not task.done():
            await asyncio.wait({task}, timeout=self._ack_interval)
        head = self._prefetched[0] if self._prefetched else None
        return task is head and task.done() and not task.cancelled() and task.exception() is None

    async def _poll(self) -> list[Message]:
        """The next poll's answer: the oldest prefetched one when there is one, else a new poll."""
        if self._prefetched:
            self._poll_task = self._prefetched.popleft()
        else:
            self._poll_task = asyncio.ensure_future(self._poll_request())
        try:
            return await self._poll_task
        finally:
            self._poll_task = None

    async def _handle_batch(self, messages: Sequence[Message]) -> None:
        started = asyncio.get_running_loop().time()
        keepalive = asyncio.create_task(self._keepalive())
        try:
            if self._concurrency == 1:
                for message in messages:
                    if self._stopping:
                        break
                    await self._handle_one(message)
            else:
                queue: deque[Message] = deque(messages)

                async def worker() -> None:
                    while queue and not self._stopping:
                        await self._handle_one(queue.popleft())

                await asyncio.gather(*(worker() for _ in range(min(self._concurrency, len(messages)))))
        finally:
            keepalive.cancel()
            await asyncio.gather(keepalive, return_exceptions=True)
        self._adapt_polls_ahead(asyncio.get_running_loop().time() - started, len(messages) >= self._max_messages)
        if await self._next_poll_soon():
            return  # the acks go with the poll the loop sends next
        await self._flush_settlements()

    async def _handle_one(self, message: Message) -> None:
        try:
            await self._handler(message)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failed += 1
            if not self._auto_ack:
                log.warning("handler failed on %s (not acked: redelivered after the visibility timeout)", message.id, exc_info=True)
                return
            delay = exc.delay_ms if isinstance(exc, RetryLater) else self._nack_delay_ms
            log.warning("handler failed on %s; nack with delay %d ms", message.id, delay, exc_info=not isinstance(exc, RetryLater))
            self._nacks.setdefault(delay, []).append(message.id)
        else:
            self.handled += 1
            if self._auto_ack:
                self._acks.append(message.id)
        if monotonic() - self._last_flush >= self._ack_interval:
            await self._flush_settlements()

    async def _flush_settlements(self, *, wait: bool | None = None) -> None:
        """Send the pending acks/nacks: awaited when ``wait`` (default: not prefetching),
        else by a background sender (one request in flight, in order)."""
        self._last_flush = monotonic()
        if self._join is None:
            return
        if wait is None:
            wait = not self._prefetch
        self._flush_wanted = True
        if wait:
            if self._settling is not None:
                await self._settling  # sends what was flushed, then ends
                self._settling = None
            self._flush_wanted = True
            await self._send_settlements()
        elif (self._acks or self._nacks) and (self._settling is None or self._settling.done()):
            self._settling = asyncio.create_task(self._send_settlements())

    async def _send_settlements(self) -> None:
        """Background sender: one request at a time. A flush asked for while a request is
        in flight is sent, with all that was settled by then, once that request is
        answered; what is settled after the last flush waits for the next one (the batch
        end or ``ack_interval_ms``), so a busy consumer sends one ack per flush, not one
        per round trip."""
        while self._flush_wanted and (self._acks or self._nacks) and self._join is not None:
            self._flush_wanted = False
            acks, self._acks = self._acks, []
            nacks, self._nacks = self._nacks, {}
            await self._settle(self._join.consumer_id, acks, nacks)

    async def _settle(self, cid: str, acks: list[str], nacks: dict[int, list[str]]) -> None:
        try:
            if acks:
                await self._client.ack(self.queue, self.group, cid, acks)
            for delay, ids in nacks.items():
                await self._client.nack(self.queue, self.group, cid, ids, delay_ms=delay)
        except VpqClientError as err:
            log.warning("could not settle messages (%s); they will be delivered again", err)

    async def _keepalive(self) -> None:
        """Poll (max 1 message, no wait) every third of the session timeout while handling."""
        assert self._join is not None
        interval = max(0.05, self._join.session_timeout_ms / 3000.0)
        while True:
            await asyncio.sleep(interval)
            if self._stopping:
                return
            try:
                got = await self._client.poll(self.queue, self.group, self._join.consumer_id, max_messages=1, wait_ms=0)
            except VpqClientError as err:
                log.warning("keep-alive poll failed: %s", err)
                continue
            self._backlog.extend(got)

    async def _drop_prefetched(self) -> None:
        """Cancel the polls ahead (what they got is released by a leave or redelivered)."""
        tasks, self._prefetched = list(self._prefetched), deque()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _shutdown(self) -> None:
        self._backlog.clear()
        await self._drop_prefetched()  # what they got is released by the leave below
        await self._flush_settlements(wait=True)
        if self._join is None:
            return
        try:
            await self._client.leave(self.queue, self.group, self._join.consumer_id)
        except VpqClientError as err:
            if not isinstance(err, NotFoundError):
                log.warning("leave failed (%s); the session timeout will remove the consumer", err)
