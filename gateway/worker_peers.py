"""``WorkerPeers``: the workers of one gateway answer for each other.

With ``gateway.workers`` = N > 1, ``vpq up`` runs the gateway as N processes (workers
``0..N-1``) on one host and port: each listens with ``SO_REUSEPORT`` and the kernel spreads
the connections over them. A worker counts only what it answered, so each one also runs a
``WorkerPeers``, which:

* listens on a private address (127.0.0.1, a free port) that answers, only to a caller
  presenting the cluster secret (``node_rpc.cluster_auth``):
  ``GET /internal/v1/gateway/metrics``, the worker's own Prometheus text, and
  ``GET /internal/v1/gateway/traffic``, ``{"queues": {name: figures}}`` of its own
  ``TrafficMeter``;
* publishes that address as ``<index>.json`` in its directory (``runfiles``'
  ``gateway_workers_dir``), written whole (tmp + rename) by ``start()`` and removed by
  ``stop()``; a restarted worker overwrites its own file;
* ``metrics(own)`` and ``traffic(own)`` ask every other published worker, concurrently and
  each within ``timeout_s``, and add the answers to this worker's own
  (``gateway.worker_sum``). A worker that does not answer in time (restarting, killed) is
  left out of that answer and logged, so one dead worker never fails a scrape.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from vpq.common.errors import VpqError
from vpq.gateway.worker_sum import sum_expositions, sum_traffic
from vpq.node_rpc.cluster_auth import CLUSTER_SECRET_HEADER, check_cluster_secret, client_headers

log = logging.getLogger("vpq.gateway.workers")

METRICS_PATH = "/internal/v1/gateway/metrics"
TRAFFIC_PATH = "/internal/v1/gateway/traffic"
DEFAULT_TIMEOUT_S = 1.0

OwnMetrics = Callable[[], bytes]
OwnTraffic = Callable[[], dict[str, dict[str, Any]]]


class WorkerPeers:
    """See the module docstring. ``own_metrics`` gives this worker's Prometheus text,
    ``own_traffic`` its figures per queue; ``secret`` guards the private address."""

    def __init__(
        self,
        directory: Path,
        index: int,
        secret: str | None,
        own_metrics: OwnMetrics,
        own_traffic: OwnTraffic,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._dir = directory
        self._index = index
        self._secret = secret
        self._own_metrics = own_metrics
        self._own_traffic = own_traffic
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.url: str | None = None

    @property
    def _file(self) -> Path:
        return self._dir / f"{self._index}.json"

    async def start(self) -> None:
        app = web.Application(middlewares=[self._require_secret])
        app.router.add_get(METRICS_PATH, self._serve_metrics)
        app.router.add_get(TRAFFIC_PATH, self._serve_traffic)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._runner = runner
        port = runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self._session = aiohttp.ClientSession(timeout=self._timeout, headers=client_headers(self._secret))
        self._dir.mkdir(parents=True, exist_ok=True)
        tmp = self._file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"url": self.url, "pid": os.getpid()}))
        os.replace(tmp, self._file)

    async def stop(self) -> None:
        try:
            published = json.loads(self._file.read_text())
            if published.get("pid") == os.getpid():
                self._file.unlink()
        except (OSError, ValueError):
            pass
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------ this worker's share
    @web.middleware
    async def _require_secret(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if self._secret is not None:
            try:
                check_cluster_secret(self._secret, request.headers.get(CLUSTER_SECRET_HEADER))
            except VpqError as exc:
                return web.json_response(exc.to_dict(), status=exc.status)
        return await handler(request)

    async def _serve_metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self._own_metrics(), content_type="text/plain", charset="utf-8")

    async def _serve_traffic(self, request: web.Request) -> web.Response:
        return web.json_response({"queues": self._own_traffic()})

    # ------------------------------------------------------------ the others' shares
    def _others(self) -> list[str]:
        urls: list[str] = []
        try:
            entries = sorted(self._dir.glob("*.json"))
        except OSError:
            return urls
        for path in entries:
            if path == self._file:
                continue
            try:
                urls.append(str(json.loads(path.read_text())["url"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # being replaced, or not a worker's file
        return urls

    async def _ask(self, url: str, path: str) -> str | None:
        assert self._session is not None, "start() first"
        try:
            async with self._session.get(url + path) as resp:
                if resp.status == 200:
                    return await resp.text()
                log.warning("gateway worker %s answered %s to %s", url, resp.status, path)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("gateway worker %s did not answer %s: %s", url, path, exc or type(exc).__name__)
        return None

    async def _gather(self, path: str) -> list[str]:
        answers = await asyncio.gather(*(self._ask(url, path) for url in self._others()))
        return [a for a in answers if a is not None]

    async def metrics(self) -> bytes:
        """This worker's Prometheus text added up with every other worker's."""
        own = self._own_metrics()
        others = await self._gather(METRICS_PATH)
        if not others:
            return own
        return sum_expositions([own.decode(), *others]).encode()

    async def traffic(self) -> dict[str, dict[str, Any]]:
        """Traffic figures per queue, added up over every worker that answered."""
        shares = [self._own_traffic()]
        for text in await self._gather(TRAFFIC_PATH):
            try:
                queues = json.loads(text)["queues"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(queues, dict):
                shares.append(queues)
        names = {name for share in shares for name in share}
        return {name: sum_traffic([s[name] for s in shares if name in s]) for name in names}
