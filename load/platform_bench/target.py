"""The platform a benchmark measures: a running one (``--url``) or its own ``vpq up``.

``PlatformTarget(url=...)`` only checks that ``/readyz`` answers 200 (``start`` raises
:class:`TargetUnavailable` otherwise). ``PlatformTarget(url=None, ...)`` starts
``vpq up --data-dir <fresh temp dir> --port <free> --physical-partitions K`` through
:class:`load.peers.vpq_process.VpqProcess`, and ``stop`` stops it and removes the
directory (unless ``keep_data``). Either way ``describe()`` answers what
``GET /v1/cluster`` said: nodes and physical partitions, and ``root_pid()`` the
platform's supervisor process when it runs on this machine (for CPU figures).

:func:`scratch_queue` creates a queue with a fresh name for one run and deletes it
afterwards, so runs against a shared platform never see each other's messages.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from vpq.load.peers.vpq_process import VpqProcess, VpqProcessError
from vpq.load.platform_bench.proc_cpu import platform_root
from vpq.sdk.client import AsyncClient
from vpq.sdk.errors import NotFoundError, VpqClientError
from vpq.sdk.models import QueueInfo

_LOCAL = ("127.0.0.1", "localhost", "::1")


class TargetUnavailable(RuntimeError):
    """No platform to measure (not ready at ``--url``, or ``vpq up`` failed)."""


class PlatformTarget:
    """One platform for one benchmark run (see the module docstring)."""

    def __init__(
        self,
        url: str | None,
        *,
        physical_partitions: int = 4,
        data_root: Path | None = None,
        keep_data: bool = False,
        start_timeout_s: float = 60.0,
    ) -> None:
        self._given_url = url.rstrip("/") if url else None
        self._physical_partitions = physical_partitions
        self._data_root = data_root
        self._keep_data = keep_data
        self._start_timeout_s = start_timeout_s
        self._process: VpqProcess | None = None
        self._data_dir: Path | None = None
        self._info: dict[str, Any] = {}
        self.url = self._given_url or ""

    @property
    def owned(self) -> bool:
        """True when this target started the platform itself."""
        return self._given_url is None

    async def start(self) -> str:
        """Make sure a ready platform exists; answers its gateway URL."""
        if self._given_url is None:
            if self._data_root is not None:
                self._data_root.mkdir(parents=True, exist_ok=True)
            self._data_dir = Path(tempfile.mkdtemp(prefix="vpq-bench-", dir=self._data_root))
            self._process = VpqProcess(self._data_dir, physical_partitions=self._physical_partitions)
            try:
                await self._process.start(timeout_s=self._start_timeout_s)
            except VpqProcessError as exc:
                self._process = None
                self._remove_data()
                raise TargetUnavailable(f"`vpq up` failed: {exc}") from exc
            self.url = self._process.url
        async with AsyncClient(self.url, timeout=5.0) as client:
            if not await client.readyz():
                await self.stop()
                raise TargetUnavailable(f"no ready vpq platform at {self.url} (GET /readyz did not answer 200)")
            try:
                cluster = await client.cluster()
            except VpqClientError as exc:
                await self.stop()
                raise TargetUnavailable(f"{self.url} is ready but GET /v1/cluster failed: {exc}") from exc
        self._info = {
            "url": self.url,
            "started_by_bench": self.owned,
            "physical_partitions": len(cluster.get("physical_partitions") or []),
            "write_nodes": len(cluster.get("write_nodes") or []),
            "read_nodes": len(cluster.get("read_nodes") or []),
        }
        return self.url

    async def stop(self) -> None:
        """Stop the platform this target started (if any) and remove its data. Idempotent."""
        process, self._process = self._process, None
        if process is not None:
            process.stop()
        self._remove_data()

    def describe(self) -> dict[str, Any]:
        return dict(self._info)

    def root_pid(self) -> int | None:
        """The platform's supervisor process (``vpq up``) when it is visible from here."""
        if self._process is not None:
            return self._process.pid
        port = urlparse(self.url).port
        return platform_root(port) if port is not None and urlparse(self.url).hostname in _LOCAL else None

    def _remove_data(self) -> None:
        data_dir, self._data_dir = self._data_dir, None
        if data_dir is not None and not self._keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)

    async def __aenter__(self) -> PlatformTarget:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@asynccontextmanager
async def scratch_queue(client: AsyncClient, prefix: str, **config: Any) -> AsyncIterator[QueueInfo]:
    """``PUT`` a queue named ``<prefix>-<random>`` with ``config``; yield its description;
    delete it on the way out (a failed delete is ignored: the run's figures stand)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    info = await client.put_queue(name, **config)
    try:
        yield info
    finally:
        try:
            await client.delete_queue(name)
        except (NotFoundError, VpqClientError):
            pass
