"""Redis Streams peer: redis-py asyncio, pipelined XADD, consumer groups.

* Durability: the driver starts its own redis-server (``common.redis_server``) with
  ``--appendonly yes --appendfsync always``: Redis answers a write only after the AOF
  write and fsync of the event-loop iteration that executed it (group commit).
  The machine's Redis on 6379 has no persistence and is not used.
* A logical queue is one stream (``ordered=False``, or one shard), or ``shards``
  streams ``<queue>:<shard>`` with messages routed by key hash (``ordered=True``).
* One consumer group per stream, created with the stream (``XGROUP CREATE ... MKSTREAM``).
  Ordered: member ``i`` of ``n`` reads exactly the shards ``s % n == i`` with one
  XREADGROUP over all of them and handles them one at a time, so a key never has two
  messages in progress. Unordered: every member reads the single stream competitively.
* Client: redis-py with its C reply parser (``hiredis``, in the ``peers`` extra) when
  installed; ``describe()`` says which parser ran.
* ``attach_spec`` lets another process use the same server without owning it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError, ResponseError
from redis.utils import HIREDIS_AVAILABLE

from vpq.common.redis_server import RedisServer, RedisServerError
from vpq.load.peers.fetch_loop import Delivery, FetchLoop
from vpq.load.procmem import rss_bytes
from vpq.load.system import GROUP, ConsumerHandle, Handler, SystemUnavailable, owned_shards, shard_of

PIPELINE_CHUNK = 1000


class RedisStreams:
    """The Redis Streams driver (see the module docstring)."""

    name = "redis"
    durability = "AOF appendfsync always: fsync before the reply (group commit per event-loop turn)"

    def __init__(self, data_dir: Path | None = None, url: str | None = None) -> None:
        self._data_dir = data_dir
        self._url = url
        self._server: RedisServer | None = None
        self._redis: aioredis.Redis | None = None
        self._shards: dict[str, int] = {}
        self._created: set[str] = set()
        self._version = ""
        self._members = 0

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        if self._url is None:
            if self._data_dir is None:
                raise SystemUnavailable("redis: neither a data directory (own server) nor a URL given")
            self._server = RedisServer(data_dir=self._data_dir, appendonly=True, appendfsync="always")
            try:
                self._server.start()
            except RedisServerError as exc:
                self._server = None
                raise SystemUnavailable(f"redis: cannot start redis-server: {exc}") from exc
            self._url = self._server.url
        self._redis = aioredis.Redis.from_url(self._url, decode_responses=False)
        try:
            info = await self._redis.info("server")
            persistence = await self._redis.config_get("appendfsync")
        except (RedisError, OSError) as exc:
            await self.stop()
            raise SystemUnavailable(f"redis: {self._url} does not answer: {exc}") from exc
        self._version = str(info.get("redis_version", ""))
        if persistence.get("appendfsync") not in ("always", b"always"):
            await self.stop()
            raise SystemUnavailable(f"redis: {self._url} does not run with appendfsync always")

    async def stop(self) -> None:
        if self._redis is not None:
            redis_, self._redis = self._redis, None
            await redis_.aclose()
        if self._server is not None:
            server, self._server = self._server, None
            server.stop()

    def describe(self) -> dict[str, Any]:
        return {
            "version": self._version,
            "url": self._url,
            "own_server": self._server is not None,
            "client_parser": "hiredis" if HIREDIS_AVAILABLE else "python",
        }

    def attach_spec(self) -> dict[str, Any]:
        return {"kind": "redis", "url": self._url}

    @property
    def server_pid(self) -> int | None:
        """The pid of the redis-server this driver started (None when it uses a URL)."""
        return self._server.proc.pid if self._server is not None and self._server.proc is not None else None

    def _client(self) -> aioredis.Redis:
        if self._redis is None:
            raise SystemUnavailable("redis: not started")
        return self._redis

    # -- queues ------------------------------------------------------------------------

    def _stream(self, queue: str, shard: int) -> str:
        return queue if self._shards.get(queue, 1) <= 1 else f"{queue}:{shard}"

    def _streams(self, queue: str) -> list[str]:
        return [self._stream(queue, s) for s in range(self._shards.get(queue, 1))]

    def register(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None:
        for q in queues:
            self._shards[q] = shards if ordered else 1

    async def setup(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None:
        self.register(queues, ordered=ordered, shards=shards)
        names = [s for q in queues for s in self._streams(q)]
        r = self._client()
        for i in range(0, len(names), PIPELINE_CHUNK):
            async with r.pipeline(transaction=False) as pipe:
                for name in names[i : i + PIPELINE_CHUNK]:
                    pipe.xgroup_create(name, GROUP, id="0", mkstream=True)
                results = await pipe.execute(raise_on_error=False)
            for name, result in zip(names[i : i + PIPELINE_CHUNK], results):
                if isinstance(result, ResponseError) and "BUSYGROUP" not in str(result):
                    raise result
                self._created.add(name)

    async def produce(self, queue: str, batch: Sequence[tuple[str, bytes]], *, lanes: int = 1) -> None:
        shards = self._shards.get(queue, 1)
        async with self._client().pipeline(transaction=False) as pipe:
            for key, payload in batch:
                pipe.xadd(self._stream(queue, shard_of(key, shards)), {"k": key, "p": payload})
            await pipe.execute()

    async def count(self, queue: str) -> int | None:
        async with self._client().pipeline(transaction=False) as pipe:
            for name in self._streams(queue):
                pipe.xlen(name)
            return sum(int(n) for n in await pipe.execute())

    async def delete(self, queues: Sequence[str]) -> None:
        names = [s for q in queues for s in self._streams(q)]
        r = self._client()
        for i in range(0, len(names), PIPELINE_CHUNK):
            await r.delete(*names[i : i + PIPELINE_CHUNK])
        self._created.difference_update(names)
        for q in queues:
            self._shards.pop(q, None)

    async def teardown(self) -> None:
        names = sorted(self._created)
        r = self._client()
        for i in range(0, len(names), PIPELINE_CHUNK):
            await r.delete(*names[i : i + PIPELINE_CHUNK])
        self._created.clear()
        self._shards.clear()

    async def server_memory(self) -> dict[str, int]:
        info = await self._client().info("memory")
        out = {"used_memory": int(info["used_memory"]), "rss_bytes": int(info["used_memory_rss"])}
        if self._server is not None and self._server.proc is not None:
            rss = rss_bytes(self._server.proc.pid)
            if rss is not None:
                out["rss_bytes"] = rss
        return out

    # -- consume -----------------------------------------------------------------------

    async def consume(
        self, queue: str, handler: Handler, *, ordered: bool, member: int = 0, members: int = 1, batch: int = 100
    ) -> ConsumerHandle:
        shards = self._shards.get(queue, 1)
        if ordered and shards > 1:
            streams = [self._stream(queue, s) for s in owned_shards(member, members, shards)]
        else:
            streams = self._streams(queue)
        self._members += 1
        consumer = f"m{self._members}-{member}"
        r = self._client()

        async def fetch(max_n: int, wait_s: float) -> list[Delivery]:
            if not streams:
                await asyncio.sleep(wait_s)
                return []
            answer = await r.xreadgroup(
                GROUP, consumer, {s: ">" for s in streams}, count=max_n, block=max(1, int(wait_s * 1000))
            )
            out: list[Delivery] = []
            for stream, entries in answer or []:
                name = stream.decode() if isinstance(stream, bytes) else stream
                for entry_id, fields in entries:
                    out.append(Delivery(fields[b"k"].decode(), fields[b"p"], (name, entry_id)))
            return out

        async def ack(deliveries: Sequence[Delivery]) -> None:
            by_stream: dict[str, list[Any]] = defaultdict(list)
            for d in deliveries:
                by_stream[d.token[0]].append(d.token[1])
            async with r.pipeline(transaction=False) as pipe:
                for name, ids in by_stream.items():
                    pipe.xack(name, GROUP, *ids)
                await pipe.execute()

        loop = FetchLoop(fetch, ack, handler, batch, name=f"redis-{queue}-{member}")
        loop.start()
        return loop
