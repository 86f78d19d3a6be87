"""vpq through its own SDK (``sdk.client.AsyncClient`` and ``sdk.consumer.Consumer``).

* Platform: the gateway at ``url``. When it does not answer and ``start_if_missing``,
  the driver starts one with ``vpq up`` (:mod:`load.peers.vpq_process`) on a free port
  with ``physical_partitions`` physical partitions, and stops it in ``stop()``.
* Durability: the gateway answers a produce 200 only once every message is fsynced
  (group commit), as API.md promises.
* A logical queue is one vpq queue ``vpqb-<tag>-<queue>`` (``ordering: key`` when
  ``ordered``, else ``none``); ``shards`` is ignored: the platform's virtual partitions
  and its consumer assignment do that job. ``produce(..., lanes=n)`` spreads messages
  over ``n`` swimlanes by key (``""``, ``lane-1``, ...); the consumers join on the
  backbone and get lane messages by the lane fallback rule.
* Payloads travel as JSON string values (they are ASCII), so a 1 KiB message is 1 KiB
  of JSON value on the wire.
* Consumers: one SDK ``Consumer`` per member (concurrency 1, long poll, ack per batch);
  the server decides which member gets which key.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from vpq.load.peers.vpq_process import VpqProcess, VpqProcessError
from vpq.load.procmem import pid_listening_on, rss_bytes, topmost_ancestor_matching
from vpq.load.system import GROUP, ConsumerHandle, Handler, SystemUnavailable, shard_of
from vpq.sdk.client import AsyncClient
from vpq.sdk.consumer import Consumer
from vpq.sdk.errors import NotFoundError, VpqClientError
from vpq.sdk.models import Message
from vpq.sdk.retry import RetryPolicy

DEFAULT_URL = "http://127.0.0.1:8080"
ADMIN_CONCURRENCY = 64  # admin requests in flight per driver, over all its calls (the gateway group-commits them)
POLL_WAIT_MS = 500


def lane_name(index: int) -> str:
    return "" if index == 0 else f"lane-{index}"


class _Member:
    """An SDK consumer as a :class:`load.system.ConsumerHandle`."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    async def stop(self) -> None:
        await self._consumer.stop(timeout_s=5.0)


class Vpq:
    """The vpq driver (see the module docstring)."""

    name = "vpq"
    durability = "fsync (group commit) before the 200 answer"

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        start_if_missing: bool = True,
        data_dir: Path | None = None,
        physical_partitions: int = 8,
        tag: str | None = None,
        binary: Path | None = None,
        dedup: bool = True,
        gateway_workers: int = 1,
    ) -> None:
        """``dedup``: the SDK gives every produced message a ``dedup_id`` (its default);
        ``gateway_workers``: the gateway processes of a platform it starts."""
        self._url = url.rstrip("/")
        self._dedup = dedup
        self._binary = binary
        self._start_if_missing = start_if_missing
        self._data_dir = data_dir
        self._physical_partitions = physical_partitions
        self._gateway_workers = gateway_workers
        self._tag = tag or uuid.uuid4().hex[:8]
        self._process: VpqProcess | None = None
        self._client: AsyncClient | None = None
        self._created: set[str] = set()
        self._info: dict[str, Any] = {}
        self._admin_slots = asyncio.Semaphore(ADMIN_CONCURRENCY)

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        probe = AsyncClient(self._url, timeout=2.0)
        try:
            up = await probe.readyz()
        finally:
            await probe.close()
        if not up:
            if not self._start_if_missing or self._data_dir is None:
                raise SystemUnavailable(f"vpq: no ready platform at {self._url}")
            self._process = VpqProcess(
                self._data_dir,
                physical_partitions=self._physical_partitions,
                binary=self._binary,
                extra_args=["--gateway-workers", str(self._gateway_workers)],
            )
            try:
                await self._process.start()
            except VpqProcessError as exc:
                self._process = None
                raise SystemUnavailable(f"vpq: no platform at {self._url}, and `vpq up` failed: {exc}") from exc
            self._url = self._process.url
        self._client = AsyncClient(
            self._url, timeout=60.0, retry=RetryPolicy(attempts=5), max_connections=512, dedup=self._dedup
        )
        try:
            cluster = await self._client.cluster()
        except VpqClientError as exc:
            await self.stop()
            raise SystemUnavailable(f"vpq: {self._url} answers but /v1/cluster failed: {exc}") from exc
        self._info = {
            "url": self._url,
            "started_by_harness": self._process is not None,
            "physical_partitions": len(cluster.get("physical_partitions", []) or []),
            "write_nodes": len(cluster.get("write_nodes", []) or []),
            "read_nodes": len(cluster.get("read_nodes", []) or []),
            "gateway_workers": self._gateway_workers if self._process is not None else None,
        }

    async def stop(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
        if self._process is not None:
            process, self._process = self._process, None
            process.stop()

    def describe(self) -> dict[str, Any]:
        return dict(self._info)

    def attach_spec(self) -> dict[str, Any]:
        return {"kind": "vpq", "url": self._url, "tag": self._tag}

    @property
    def server_pid(self) -> int | None:
        """The pid of the `vpq up` this driver started (None when it measures another)."""
        return self._process.pid if self._process is not None else None

    def _api(self) -> AsyncClient:
        if self._client is None:
            raise SystemUnavailable("vpq: not started")
        return self._client

    def _queue(self, queue: str) -> str:
        return f"vpqb-{self._tag}-{queue}"

    # -- queues ------------------------------------------------------------------------

    def register(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None:
        """Nothing to record: the platform knows its queues."""

    async def setup(self, queues: Sequence[str], *, ordered: bool = True, shards: int = 1) -> None:
        api = self._api()
        sem = self._admin_slots

        async def one(q: str) -> None:
            async with sem:
                await api.put_queue(self._queue(q), ordering="key" if ordered else "none")
                self._created.add(self._queue(q))

        await asyncio.gather(*(one(q) for q in queues))

    async def produce(self, queue: str, batch: Sequence[tuple[str, bytes]], *, lanes: int = 1) -> None:
        if lanes > 1:
            messages = [{"key": k, "value": p.decode("ascii"), "lane": lane_name(shard_of(k, lanes))} for k, p in batch]
        else:
            messages = [{"key": k, "value": p.decode("ascii")} for k, p in batch]
        await self._api().produce(self._queue(queue), messages)

    async def count(self, queue: str) -> int | None:
        info = await self._api().get_queue(self._queue(queue))
        total = (info.get("traffic") or {}).get("messages_total")
        return int(total) if isinstance(total, int) else None

    async def delete(self, queues: Sequence[str]) -> None:
        api = self._api()
        sem = self._admin_slots

        async def one(name: str) -> None:
            async with sem:
                try:
                    await api.delete_queue(name)
                except NotFoundError:
                    pass
                self._created.discard(name)

        await asyncio.gather(*(one(self._queue(q)) for q in queues))

    async def teardown(self) -> None:
        """Delete every queue this driver created, unless the platform is the harness's
        own: that one is stopped and its data directory removed as a whole."""
        if self._process is not None:
            self._created.clear()
            return
        api = self._api()
        sem = self._admin_slots

        async def one(name: str) -> None:
            async with sem:
                try:
                    await api.delete_queue(name)
                except NotFoundError:
                    pass

        await asyncio.gather(*(one(n) for n in sorted(self._created)))
        self._created.clear()

    async def server_memory(self) -> dict[str, int]:
        if self._process is not None and self._process.pid is not None:
            root: int | None = self._process.pid
        else:
            pid = pid_listening_on(urlparse(self._url).port or 80)
            root = topmost_ancestor_matching(pid, "vpq up") if pid is not None else None
        rss = rss_bytes(root, include_children=True) if root is not None else None
        return {} if rss is None else {"rss_bytes": rss}

    # -- consume -----------------------------------------------------------------------

    async def consume(
        self, queue: str, handler: Handler, *, ordered: bool, member: int = 0, members: int = 1, batch: int = 100
    ) -> ConsumerHandle:
        async def on_message(message: Message) -> None:
            value = message.value
            payload = value.encode("ascii") if isinstance(value, str) else bytes(value)
            await handler(message.key or "", payload)

        consumer = Consumer(
            self._api(),
            self._queue(queue),
            GROUP,
            on_message,
            start="earliest",
            max_messages=batch,
            wait_ms=POLL_WAIT_MS,
            concurrency=1,
        )
        await consumer.start()
        return _Member(consumer)
