"""NATS JetStream peer: nats-py, file-store streams, pull consumers.

* Server: the machine's nats-server (default ``nats://127.0.0.1:4222``), JetStream on.
  Every stream this driver creates is named ``VPQB_<tag>_...`` (``tag`` unique per run)
  and deleted by ``teardown``.
* Durability: a publish counts once its PubAck arrived: the message is in the stream's
  file store. nats-server does not fsync per message (it syncs every 2 minutes by
  default; 2.9 cannot be told otherwise), so this is weaker than fsync-before-ack.
* Layout ``streams``: one stream per logical queue, subjects ``vpqb.<tag>.<queue>.<shard>``.
  Layout ``subjects``: one stream for every queue, the queue only a subject in it.
* Produce: ``publish_async`` for the whole batch, then wait for every PubAck.
* Ordered consume: one durable pull consumer per shard (filter subject of that shard,
  ``max_ack_pending`` bounded); member ``i`` of ``n`` owns the shards ``s % n == i``
  and handles their messages one at a time (per-shard feeders keep each shard's order).
  Unordered: one durable consumer on the whole queue, every member fetching from it.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

import nats
import nats.errors
import nats.js.errors
from nats.js import api

from vpq.load.peers.fetch_loop import Delivery, FetchLoop, Inbox
from vpq.load.procmem import pid_listening_on, rss_bytes
from vpq.load.system import ConsumerHandle, Handler, SystemUnavailable, owned_shards, shard_of

log = logging.getLogger(__name__)

DEFAULT_URL = "nats://127.0.0.1:4222"
ADMIN_CONCURRENCY = 16
KEY_HEADER = "k"


def _token(name: str) -> str:
    """A name usable inside NATS stream, consumer and subject names."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


class NatsJetStream:
    """The NATS JetStream driver (see the module docstring)."""

    durability = (
        "JetStream file store, PubAck per message; no fsync per message "
        "(nats-server syncs every 2 min by default): weaker than fsync-before-ack"
    )

    def __init__(self, url: str = DEFAULT_URL, layout: str = "streams", tag: str | None = None) -> None:
        if layout not in ("streams", "subjects"):
            raise ValueError("layout is 'streams' or 'subjects'")
        self._url = url
        self.layout = layout
        self.name = "nats" if layout == "streams" else "nats-subjects"
        self._tag = tag or uuid.uuid4().hex[:8]
        self._nc: Any = None
        self._js: Any = None
        self._shards: dict[str, int] = {}
        self._streams: set[str] = set()
        self._durables: dict[str, dict[str, asyncio.Future[Any]]] = {}
        self._version = ""

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        try:
            self._nc = await nats.connect(self._url, connect_timeout=2, max_reconnect_attempts=0, allow_reconnect=False)
            self._js = self._nc.jetstream(timeout=30)
            await self._js.account_info()
        except (nats.errors.Error, OSError, TimeoutError, nats.js.errors.Error) as exc:
            await self.stop()
            raise SystemUnavailable(f"nats: no JetStream at {self._url}: {exc!r}") from exc
        v = self._nc.connected_server_version
        self._version = f"{v.major}.{v.minor}.{v.patch}"

    async def stop(self) -> None:
        if self._nc is not None:
            nc, self._nc = self._nc, None
            try:
                await nc.close()
            except nats.errors.Error:
                pass

    def describe(self) -> dict[str, Any]:
        return {"version": self._version, "url": self._url, "layout": self.layout}

    def attach_spec(self) -> dict[str, Any]:
        return {"kind": "nats", "url": self._url, "layout": self.layout, "tag": self._tag}

    # -- names -------------------------------------------------------------------------

    def _stream(self, queue: str) -> str:
        if self.layout == "subjects":
            return f"VPQB_{self._tag}_ALL"
        return f"VPQB_{self._tag}_{_token(queue)}"

    def _subject(self, queue: str, shard: int | str) -> str:
        return f"vpqb.{self._tag}.{_token(queue)}.{shard}"

    # -- queues ------------------------------------------------------------------------

    def register(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None:
        for q in queues:
            self._shards[q] = shards if ordered else 1

    async def _add_stream(self, name: str, subjects: list[str]) -> None:
        await self._js.add_stream(name=name, subjects=subjects, storage=api.StorageType.FILE)
        self._streams.add(name)

    async def setup(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None:
        self.register(queues, ordered=ordered, shards=shards)
        if self.layout == "subjects":
            name = self._stream("")
            if name not in self._streams:
                await self._add_stream(name, [f"vpqb.{self._tag}.>"])
            return
        sem = asyncio.Semaphore(ADMIN_CONCURRENCY)

        async def one(q: str) -> None:
            async with sem:
                await self._add_stream(self._stream(q), [self._subject(q, "*")])

        await asyncio.gather(*(one(q) for q in queues))

    async def produce(self, queue: str, batch: Sequence[tuple[str, bytes]], *, lanes: int = 1) -> None:
        shards = self._shards.get(queue, 1)
        futures = [
            await self._js.publish_async(self._subject(queue, shard_of(key, shards)), payload, headers={KEY_HEADER: key})
            for key, payload in batch
        ]
        await asyncio.gather(*futures)

    async def count(self, queue: str) -> int | None:
        if self.layout == "streams":
            info = await self._js.stream_info(self._stream(queue))
            return int(info.state.messages)
        info = await self._js.stream_info(self._stream(queue), subjects_filter=self._subject(queue, "*"))
        return sum(int(n) for n in (info.state.subjects or {}).values())

    async def delete(self, queues: Sequence[str]) -> None:
        sem = asyncio.Semaphore(ADMIN_CONCURRENCY)

        async def one(q: str) -> None:
            async with sem:
                if self.layout == "streams":
                    name = self._stream(q)
                    if name in self._streams:
                        try:
                            await self._js.delete_stream(name)
                        except nats.js.errors.NotFoundError:
                            pass  # gone already: a deletion that answered an error may still have happened
                        self._streams.discard(name)
                else:
                    for durable in sorted(self._durables.get(q, ())):
                        try:
                            await self._js.delete_consumer(self._stream(q), durable)
                        except nats.js.errors.NotFoundError:
                            pass
                    await self._js.purge_stream(self._stream(q), subject=self._subject(q, "*"))
                self._durables.pop(q, None)

        await asyncio.gather(*(one(q) for q in queues))
        for q in queues:
            self._shards.pop(q, None)

    async def teardown(self) -> None:
        sem = asyncio.Semaphore(ADMIN_CONCURRENCY)

        async def one(name: str) -> None:
            async with sem:
                try:
                    await self._js.delete_stream(name)
                except nats.js.errors.NotFoundError:
                    pass

        await asyncio.gather(*(one(n) for n in sorted(self._streams)))
        self._streams.clear()
        self._shards.clear()
        self._durables.clear()

    async def server_memory(self) -> dict[str, int]:
        out: dict[str, int] = {}
        port = urlparse(self._url).port or 4222
        pid = pid_listening_on(port)
        rss = rss_bytes(pid) if pid is not None else None
        if rss is not None:
            out["rss_bytes"] = rss
        info = await self._js.account_info()
        out["jetstream_memory"] = int(info.memory)
        out["jetstream_storage"] = int(info.storage)
        return out

    # -- consume -----------------------------------------------------------------------

    async def _bind(self, queue: str, durable: str, subject: str, max_ack_pending: int) -> Any:
        stream = self._stream(queue)
        config = api.ConsumerConfig(
            durable_name=durable,
            filter_subject=subject,
            ack_policy=api.AckPolicy.EXPLICIT,
            deliver_policy=api.DeliverPolicy.ALL,
            max_ack_pending=max_ack_pending,
            ack_wait=60,
        )
        created = self._durables.setdefault(queue, {})
        if durable not in created:
            created[durable] = asyncio.ensure_future(self._js.add_consumer(stream, config))
        await asyncio.shield(created[durable])  # members of one group share the creation
        return await self._js.pull_subscribe_bind(durable=durable, stream=stream)

    async def consume(
        self, queue: str, handler: Handler, *, ordered: bool, member: int = 0, members: int = 1, batch: int = 100
    ) -> ConsumerHandle:
        shards = self._shards.get(queue, 1)
        qtok = _token(queue)
        if not ordered:
            sub = await self._bind(queue, f"{qtok}-all", self._subject(queue, "*"), max(1000, batch * members * 2))

            async def fetch(max_n: int, wait_s: float) -> list[Delivery]:
                try:
                    msgs = await sub.fetch(max_n, timeout=max(wait_s, 0.05))
                except TimeoutError:  # nats-py raises both its own and asyncio's
                    return []
                return [Delivery(m.headers[KEY_HEADER], m.data, m) for m in msgs]

            loop = FetchLoop(fetch, _ack, handler, batch, close=sub.unsubscribe, name=f"nats-{queue}-{member}")
            loop.start()
            return loop

        inbox = Inbox()
        stopping = asyncio.Event()
        subs = [
            await self._bind(queue, f"{qtok}-s{s}", self._subject(queue, s if shards > 1 else "*"), batch * 2)
            for s in owned_shards(member, members, shards)
        ]

        async def feed(sub: Any) -> None:
            while not stopping.is_set():
                try:
                    msgs = await sub.fetch(batch, timeout=0.5)
                except TimeoutError:  # nats-py raises both its own and asyncio's
                    continue
                except nats.errors.Error as exc:  # a feeder must not die: its shard would stall
                    log.warning("nats: fetch from %s failed: %r", queue, exc)
                    await asyncio.sleep(0.1)
                    continue
                for m in msgs:
                    inbox.put(Delivery(m.headers[KEY_HEADER], m.data, m))

        feeders = [asyncio.create_task(feed(sub)) for sub in subs]

        async def close() -> None:
            stopping.set()
            for task in feeders:
                task.cancel()
            await asyncio.gather(*feeders, return_exceptions=True)
            for sub in subs:
                await sub.unsubscribe()

        loop = FetchLoop(inbox.fetch, _ack, handler, batch, close=close, name=f"nats-{queue}-{member}")
        loop.start()
        return loop


async def _ack(deliveries: Sequence[Delivery]) -> None:
    for d in deliveries:
        await d.token.ack()
