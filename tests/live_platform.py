"""A real vpq platform inside the test process, for module-scoped fixtures.

``LivePlatform`` starts a real redis-server (a child process on a free port), then the
real roles on an event loop of their own, in a background thread: write nodes
(``WriteNodeService``), read nodes (``ReadNodeService``) and, unless ``gateway=False``,
the gateway (``create_app`` over ``ClusterBackend`` served by ``GatewayServer``). It is
what ``vpq up --single-process`` runs, without the CLI around it.

Tests talk to it over HTTP from their own loop (``url``; the nodes' ``address`` in
``writers`` and ``readers``), or build their own gateway app over a ``ClusterBackend``
on ``redis_url`` with ``settings``. ``run(coro)`` runs a coroutine on the platform's
loop; ``serve(app)`` runs one more aiohttp app there (for synchronous tests that need,
say, a recording proxy in front of the gateway). ``stop()`` stops everything it
started. With ``cluster_secret`` every role checks and sends it
(``node_rpc.cluster_auth``). ``running(settings)`` is the form fixtures use: it skips (fails under
``VPQ_TEST_STRICT=1``) without a redis-server binary, and stops the platform at the end.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import requests
from aiohttp import web

from tests.needs import missing
from vpq.common.redis_server import RedisServer, find_redis_server
from vpq.config.settings import ClusterSettings, GatewaySettings, RedisSettings, Settings
from vpq.gateway.app import create_app
from vpq.gateway.cluster_backend import ClusterBackend
from vpq.gateway.server import GatewayServer
from vpq.read_nodes.service import ReadNodeService
from vpq.write_nodes.service import WriteNodeService

T = TypeVar("T")


def platform_settings(
    data_dir: Path, *, write_nodes: int = 1, read_nodes: int = 1, physical_partitions: int = 4, **sections: Any
) -> Settings:
    """Product settings for a test platform: product defaults but the node counts, the data
    directory, a gateway on a free port, a short metadata poll, and any whole settings
    sections given (``queues=QueueDefaults(...)``)."""
    return Settings(
        data_dir=data_dir,
        cluster=ClusterSettings(write_nodes=write_nodes, read_nodes=read_nodes, physical_partitions=physical_partitions),
        redis=RedisSettings(poll_fallback_ms=50),
        gateway=GatewaySettings(port=0),
        **sections,
    )


class LivePlatform:
    """See the module docstring."""

    def __init__(self, settings: Settings, *, gateway: bool = True, cluster_secret: str | None = None) -> None:
        self.settings = settings
        self.cluster_secret = cluster_secret
        self._with_gateway = gateway
        self._redis = RedisServer(settings.data_dir / "redis", appendonly=False)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="live-platform", daemon=True)
        self._started: list[Any] = []
        self._runners: list[web.AppRunner] = []
        self.writers: list[WriteNodeService] = []
        self.readers: list[ReadNodeService] = []
        self.url = ""

    @property
    def redis_url(self) -> str:
        return self._redis.url

    def start(self, ready_timeout_s: float = 60.0) -> None:
        self.settings.data_dir.mkdir(parents=True, exist_ok=True)
        self._redis.start()
        self._thread.start()
        try:
            self.run(self._start_roles())
            if self._with_gateway:
                self._wait_ready(ready_timeout_s)
        except BaseException:
            self.stop()
            raise

    async def _start_roles(self) -> None:
        s = self.settings
        for i in range(s.cluster.write_nodes):
            node = WriteNodeService(s, f"w{i}", i, self.redis_url, cluster_secret=self.cluster_secret)
            await node.start()
            self._started.append(node)
            self.writers.append(node)
        for j in range(s.cluster.read_nodes):
            reader = ReadNodeService(s, f"r{j}", self.redis_url, cluster_secret=self.cluster_secret)
            await reader.start()
            self._started.append(reader)
            self.readers.append(reader)
        if self._with_gateway:
            app = create_app(s.gateway, ClusterBackend(s, self.redis_url, cluster_secret=self.cluster_secret), queue_defaults=s.queues)
            server = GatewayServer(app, s.gateway)
            await server.start()
            self._started.append(server)
            self.url = server.url

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"the live platform was not ready after {timeout_s}s")

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        """Run ``coro`` on the platform's loop and give its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def serve(self, app: web.Application) -> str:
        """Serve ``app`` on a free loopback port from the platform's loop; its URL."""

        async def start() -> str:
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self._runners.append(runner)
            host, port = runner.addresses[0][:2]
            return f"http://{host}:{port}"

        return self.run(start())

    def unserve(self) -> None:
        """Stop every app started by ``serve``."""

        async def stop() -> None:
            while self._runners:
                await self._runners.pop().cleanup()

        self.run(stop())

    def stop(self) -> None:
        if self._thread.is_alive():
            self.unserve()

            async def stop_roles() -> None:
                while self._started:
                    await self._started.pop().stop()
                rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in rest:
                    task.cancel()
                await asyncio.gather(*rest, return_exceptions=True)

            try:
                self.run(stop_roles())
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()
        self._redis.stop()


@contextmanager
def running(settings: Settings, *, gateway: bool = True, cluster_secret: str | None = None) -> Iterator[LivePlatform]:
    """A started ``LivePlatform``, stopped on exit (see the module docstring)."""
    if find_redis_server() is None:
        missing("needs the redis-server binary")
    live = LivePlatform(settings, gateway=gateway, cluster_secret=cluster_secret)
    live.start()
    try:
        yield live
    finally:
        live.stop()
