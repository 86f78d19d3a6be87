"""``Client``: a blocking wrapper over :class:`AsyncClient` for scripts.

It runs a private event loop in a daemon thread; every method submits the matching
coroutine to it and blocks until the answer (same arguments, answers and exceptions as
the async client). Safe to call from several threads. ``close()`` (or ``with``) shuts the
loop and its thread down. Not for use inside a running event loop's thread with the
expectation of concurrency: there, use ``AsyncClient``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from vpq.sdk.client import DEFAULT_URL, AsyncClient
from vpq.sdk.errors import ClientClosedError
from vpq.sdk.models import (
    ClusterInfo,
    CurrentMap,
    GroupInfo,
    JoinResult,
    Message,
    ProduceMessage,
    ProduceResults,
    QueueInfo,
)
from vpq.sdk.retry import RetryPolicy

T = TypeVar("T")


class Client:
    """Synchronous vpq client. See :class:`sdk.client.AsyncClient` for each method's contract."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._aio = AsyncClient(base_url, token=token, timeout=timeout, retry=retry)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vpq-sync-client", daemon=True)
        self._thread.start()
        self._closed = False
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return self._aio.base_url

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coro.close()
            raise ClientClosedError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        """Close the HTTP session, stop the loop and join its thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        asyncio.run_coroutine_threadsafe(self._aio.close(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- health ------------------------------------------------------------------------

    def healthz(self) -> bool:
        return self._call(self._aio.healthz())

    def readyz(self) -> bool:
        return self._call(self._aio.readyz())

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        self._call(self._aio.wait_ready(timeout_s))

    def metrics(self) -> str:
        return self._call(self._aio.metrics())

    # -- queues ------------------------------------------------------------------------

    def put_queue(self, name: str, **config: Any) -> QueueInfo:
        return self._call(self._aio.put_queue(name, **config))

    def get_queue(self, name: str) -> QueueInfo:
        return self._call(self._aio.get_queue(name))

    def list_queues(self) -> list[QueueInfo]:
        return self._call(self._aio.list_queues())

    def delete_queue(self, name: str) -> None:
        self._call(self._aio.delete_queue(name))

    # -- produce -----------------------------------------------------------------------

    def produce(
        self,
        queue: str,
        messages: Sequence[ProduceMessage | Mapping[str, Any]],
        lane: str | None = None,
        env: str | None = None,
        set: str | None = None,  # noqa: A002
    ) -> ProduceResults:
        return self._call(self._aio.produce(queue, messages, lane=lane, env=env, set=set))

    # -- consume -----------------------------------------------------------------------

    def join(
        self,
        queue: str,
        group: str,
        consumer_id: str | None = None,
        lane: str | None = None,
        env: str | None = None,
        set: str | None = None,  # noqa: A002
        start: str | None = None,
    ) -> JoinResult:
        return self._call(
            self._aio.join(queue, group, consumer_id=consumer_id, lane=lane, env=env, set=set, start=start)
        )

    def poll(
        self, queue: str, group: str, consumer_id: str, max_messages: int | None = None, wait_ms: int | None = None
    ) -> list[Message]:
        return self._call(self._aio.poll(queue, group, consumer_id, max_messages=max_messages, wait_ms=wait_ms))

    def ack(self, queue: str, group: str, consumer_id: str, ids: Sequence[str]) -> int:
        return self._call(self._aio.ack(queue, group, consumer_id, ids))

    def nack(self, queue: str, group: str, consumer_id: str, ids: Sequence[str], delay_ms: int = 0) -> int:
        return self._call(self._aio.nack(queue, group, consumer_id, ids, delay_ms=delay_ms))

    def leave(self, queue: str, group: str, consumer_id: str) -> None:
        self._call(self._aio.leave(queue, group, consumer_id))

    def group(self, queue: str, group: str) -> GroupInfo:
        return self._call(self._aio.group(queue, group))

    def delete_group(self, queue: str, group: str) -> None:
        self._call(self._aio.delete_group(queue, group))

    def redrive(self, queue: str, group: str, max_messages: int | None = None) -> int:
        return self._call(self._aio.redrive(queue, group, max_messages))

    # -- cluster -----------------------------------------------------------------------

    def cluster(self) -> ClusterInfo:
        return self._call(self._aio.cluster())

    def elect_leader(self, partition: int, node: str, *, unclean: bool = False) -> dict[str, Any]:
        return self._call(self._aio.elect_leader(partition, node, unclean=unclean))

    def current_map(self) -> CurrentMap:
        return self._call(self._aio.current_map())
