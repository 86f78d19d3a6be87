"""RabbitMQ peer: aio-pika, quorum queues, publisher confirms.

* Server: the machine's RabbitMQ (default ``amqp://guest:guest@127.0.0.1:5672/``). Every
  queue this driver declares is named ``vpqb-<tag>-...`` (``tag`` unique per run) and
  deleted by ``teardown``.
* Durability: quorum queues (Raft log, fsynced before the leader confirms; one node
  here) with persistent messages; ``produce`` returns after the publisher confirm of
  every message of the batch.
* A logical queue is one quorum queue, or (``ordered=True``) ``shards`` quorum queues
  ``<queue>.<shard>`` with messages routed by key hash, each with
  ``x-single-active-consumer`` (the broker itself refuses a second active reader).
  Member ``i`` of ``n`` consumes exactly the shards ``s % n == i`` on one channel and
  handles the deliveries one at a time in arrival order. Unordered: every member
  consumes the single queue (competing consumers).
* Prefetch (``basic.qos``) per consumer = the member's batch size; acks use
  ``multiple=True`` on the last handled delivery of a batch.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

import aio_pika
import aiormq
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from vpq.load.peers.fetch_loop import Delivery, FetchLoop, Inbox
from vpq.load.procmem import pid_listening_on, rss_bytes
from vpq.load.system import ConsumerHandle, Handler, SystemUnavailable, owned_shards, shard_of

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"
PUBLISH_CHANNELS = 8
ADMIN_CONCURRENCY = 16
KEY_HEADER = "k"


class RabbitMQ:
    """The RabbitMQ quorum-queue driver (see the module docstring)."""

    name = "rabbitmq"
    durability = "quorum queue, persistent messages, publisher confirm after the Raft log fsync"

    def __init__(self, url: str = DEFAULT_URL, tag: str | None = None) -> None:
        self._url = url
        self._tag = tag or uuid.uuid4().hex[:8]
        self._conn: AbstractConnection | None = None
        self._publishers: list[AbstractChannel] = []
        self._next_publisher = itertools.count()
        self._shards: dict[str, int] = {}
        self._created: set[str] = set()
        self._version = ""

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        try:
            self._conn = await aio_pika.connect(self._url, timeout=5)
            self._publishers = [await self._conn.channel(publisher_confirms=True) for _ in range(PUBLISH_CHANNELS)]
        except (OSError, aiormq.exceptions.AMQPError, TimeoutError) as exc:
            await self.stop()
            raise SystemUnavailable(f"rabbitmq: cannot connect to {urlparse(self._url).netloc.split('@')[-1]}: {exc!r}") from exc
        props = getattr(getattr(self._conn, "transport", None), "connection", None)
        server = getattr(props, "server_properties", None) or {}
        version = server.get("version", b"")
        self._version = version.decode() if isinstance(version, bytes) else str(version)

    async def stop(self) -> None:
        self._publishers = []
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    def describe(self) -> dict[str, Any]:
        return {"version": self._version, "host": urlparse(self._url).netloc.split("@")[-1], "queue_type": "quorum"}

    def attach_spec(self) -> dict[str, Any]:
        return {"kind": "rabbitmq", "url": self._url, "tag": self._tag}

    def _connection(self) -> AbstractConnection:
        if self._conn is None:
            raise SystemUnavailable("rabbitmq: not started")
        return self._conn

    # -- names -------------------------------------------------------------------------

    def _queue_name(self, queue: str, shard: int) -> str:
        base = f"vpqb-{self._tag}-{queue}"
        return base if self._shards.get(queue, 1) <= 1 else f"{base}.{shard}"

    def _names(self, queue: str) -> list[str]:
        return [self._queue_name(queue, s) for s in range(self._shards.get(queue, 1))]

    # -- queues ------------------------------------------------------------------------

    def register(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None:
        for q in queues:
            self._shards[q] = shards if ordered else 1

    async def setup(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None:
        self.register(queues, ordered=ordered, shards=shards)
        arguments: dict[str, Any] = {"x-queue-type": "quorum"}
        if ordered and shards > 1:
            arguments["x-single-active-consumer"] = True
        names = [n for q in queues for n in self._names(q)]
        await self._on_channels(names, lambda ch, n: ch.declare_queue(n, durable=True, arguments=arguments))
        self._created.update(names)

    async def _on_channels(self, names: Sequence[str], op: Any) -> None:
        """Run ``op(channel, name)`` for every name, ``ADMIN_CONCURRENCY`` at a time over
        a few fresh channels (closed afterwards)."""
        conn = self._connection()
        channels = [await conn.channel(publisher_confirms=False) for _ in range(min(4, max(1, len(names))))]
        sem = asyncio.Semaphore(ADMIN_CONCURRENCY)

        async def one(i: int, name: str) -> None:
            async with sem:
                await op(channels[i % len(channels)], name)

        try:
            await asyncio.gather(*(one(i, n) for i, n in enumerate(names)))
        finally:
            for ch in channels:
                if not ch.is_closed:
                    await ch.close()

    async def produce(self, queue: str, batch: Sequence[tuple[str, bytes]], *, lanes: int = 1) -> None:
        channel = self._publishers[next(self._next_publisher) % len(self._publishers)]
        shards = self._shards.get(queue, 1)
        exchange = channel.default_exchange
        await asyncio.gather(
            *(
                exchange.publish(
                    aio_pika.Message(payload, headers={KEY_HEADER: key}, delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key=self._queue_name(queue, shard_of(key, shards)),
                    mandatory=True,
                )
                for key, payload in batch
            )
        )

    async def count(self, queue: str) -> int | None:
        total = 0
        channel = await self._connection().channel(publisher_confirms=False)
        try:
            for name in self._names(queue):
                declared = await channel.declare_queue(name, passive=True)
                total += int(declared.declaration_result.message_count or 0)
        finally:
            if not channel.is_closed:
                await channel.close()
        return total

    async def delete(self, queues: Sequence[str]) -> None:
        names = [n for q in queues for n in self._names(q)]
        await self._on_channels(names, lambda ch, n: ch.queue_delete(n))
        self._created.difference_update(names)
        for q in queues:
            self._shards.pop(q, None)

    async def teardown(self) -> None:
        names = sorted(self._created)
        if names:
            await self._on_channels(names, lambda ch, n: ch.queue_delete(n))
        self._created.clear()
        self._shards.clear()

    async def server_memory(self) -> dict[str, int]:
        pid = pid_listening_on(urlparse(self._url).port or 5672)
        rss = rss_bytes(pid) if pid is not None else None
        return {} if rss is None else {"rss_bytes": rss}

    # -- consume -----------------------------------------------------------------------

    async def consume(
        self, queue: str, handler: Handler, *, ordered: bool, member: int = 0, members: int = 1, batch: int = 100
    ) -> ConsumerHandle:
        shards = self._shards.get(queue, 1)
        if ordered and shards > 1:
            names = [self._queue_name(queue, s) for s in owned_shards(member, members, shards)]
        else:
            names = self._names(queue)
        channel = await self._connection().channel(publisher_confirms=False)
        await channel.set_qos(prefetch_count=batch)
        inbox = Inbox()

        async def on_message(message: AbstractIncomingMessage) -> None:
            key = message.headers.get(KEY_HEADER)
            inbox.put(Delivery(key.decode() if isinstance(key, bytes) else str(key), message.body, message))

        for name in names:
            declared = await channel.declare_queue(name, passive=True)
            await declared.consume(on_message)

        async def ack(deliveries: Sequence[Delivery]) -> None:
            await deliveries[-1].token.ack(multiple=True)

        async def close() -> None:
            if not channel.is_closed:
                await channel.close()

        loop = FetchLoop(inbox.fetch, ack, handler, batch, close=close, name=f"rabbitmq-{queue}-{member}")
        loop.start()
        return loop
