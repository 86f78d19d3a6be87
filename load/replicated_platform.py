"""A replicated ``vpq up`` for fault campaigns and benchmarks, and the faults it can suffer.

:class:`ReplicatedPlatform` starts ``vpq up --write-nodes W --replication-factor R
--min-insync M`` (``load.peers.vpq_process.VpqProcess``) on its own data directory with
short leases, and controls its real processes: ``cluster()`` (``GET /v1/cluster``),
``leader_of(pp)`` / ``follower_of(pp)`` (node ids), ``pid_of(node_id)``, ``signal``
(SIGKILL, SIGSTOP, SIGCONT to one write node; ``vpq up`` restarts a killed one),
``kill_all`` (SIGKILL of the whole process group: a power loss of every node),
``restart`` (a new ``vpq up`` on the same directory and port; with ``redis_url`` the
platform uses that Redis, e.g. through a ``load.tcp_proxy.CuttingProxy``) and
``wait_healthy`` (every partition led, online, with every replica in sync).

The files of replica ``i`` of pp are under ``<data>/write-node-<i>/partitions/pp-NNNNN``
(``partition_files``); ``cut_unsynced_tail`` and ``flip_bit`` damage them the way a
power loss and a bad disk would.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from vpq.codec.batch_common import HEADER, HEADER_SIZE, LENGTH_END
from vpq.load.peers.vpq_process import LOG_NAME, VpqProcess

WRITE_MODULE = "vpq.write_nodes.main"


class ReplicatedPlatform:
    def __init__(
        self,
        data_dir: Path,
        *,
        write_nodes: int = 2,
        replication_factor: int = 2,
        min_insync: int = 1,
        physical_partitions: int = 2,
        lease_ttl_ms: int = 1500,
        replica_lag_max_ms: int = 1000,
        extra_args: list[str] | None = None,
        redis_url: str | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.write_nodes = write_nodes
        self.replication_factor = replication_factor
        self.physical_partitions = physical_partitions
        self.args = [
            "--write-nodes", str(write_nodes),
            "--replication-factor", str(replication_factor),
            "--min-insync", str(min_insync),
            "--set", f"redis.lease_ttl_ms={lease_ttl_ms}",
            "--set", f"cluster.replica_lag_max_ms={replica_lag_max_ms}",
            "--set", "queues.session_timeout_ms=3000",
            *(extra_args or []),
            *(["--redis-url", redis_url] if redis_url else []),
        ]
        self.port = 0
        self.process: VpqProcess | None = None

    @property
    def url(self) -> str:
        assert self.process is not None
        return self.process.url

    async def start(self, timeout_s: float = 90.0) -> None:
        self.process = VpqProcess(
            self.data_dir, port=self.port, physical_partitions=self.physical_partitions, extra_args=self.args
        )
        await self.process.start(timeout_s=timeout_s)
        self.port = self.process.port

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def kill_all(self) -> None:
        """SIGKILL of the supervisor's whole process group (Redis included)."""
        proc = self.process
        if proc is None or proc.proc is None:
            return
        try:
            os.killpg(proc.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.proc.wait()
        proc.proc = None
        proc.stop()
        self.process = None

    async def restart(self, timeout_s: float = 90.0) -> None:
        """A new ``vpq up`` on the same directory; the old one's log is set aside first
        (its node exits would read as a crash loop of the new one)."""
        log = self.data_dir / LOG_NAME
        if log.exists():
            n = len(list(self.data_dir.glob(LOG_NAME + ".*")))
            log.rename(self.data_dir / f"{LOG_NAME}.{n + 1}")
        await self.start(timeout_s)

    # ------------------------------------------------------------- inspection
    async def cluster(self, session: aiohttp.ClientSession) -> dict[str, Any]:
        async with session.get(self.url + "/v1/cluster", timeout=aiohttp.ClientTimeout(total=10)) as resp:
            resp.raise_for_status()
            return await resp.json()

    async def partition(self, session: aiohttp.ClientSession, pp: int) -> dict[str, Any]:
        for p in (await self.cluster(session))["physical_partitions"]:
            if p["id"] == pp:
                return p
        return {}

    async def leader_of(self, session: aiohttp.ClientSession, pp: int) -> str | None:
        return (await self.partition(session, pp)).get("leader")

    async def follower_of(self, session: aiohttp.ClientSession, pp: int) -> str | None:
        p = await self.partition(session, pp)
        others = [r for r in p.get("replicas", []) if r != p.get("leader")]
        return others[0] if others else None

    def pid_of(self, node_id: str) -> int | None:
        if self.process is None or self.process.pid is None:
            return None
        for child in psutil.Process(self.process.pid).children(recursive=True):
            try:
                cmd = child.cmdline()
            except psutil.NoSuchProcess:
                continue
            if WRITE_MODULE in cmd and "--node-id" in cmd and cmd[cmd.index("--node-id") + 1] == node_id:
                return child.pid
        return None

    def signal(self, node_id: str, sig: int) -> int:
        pid = self.pid_of(node_id)
        if pid is None:
            raise RuntimeError(f"write node {node_id} has no process")
        os.kill(pid, sig)
        return pid

    async def wait_restarted(self, node_id: str, old_pid: int, timeout_s: float = 60.0) -> None:
        """Until ``vpq up`` runs a new process for ``node_id``."""
        deadline = time.monotonic() + timeout_s
        while self.pid_of(node_id) in (None, old_pid):
            if time.monotonic() > deadline:
                raise TimeoutError(f"write node {node_id} not restarted after {timeout_s:.0f}s")
            await asyncio.sleep(0.1)

    async def wait_healthy(self, session: aiohttp.ClientSession, timeout_s: float = 90.0) -> float:
        """Seconds until every partition is led, online and fully in sync."""
        started = time.monotonic()
        while True:
            try:
                parts = (await self.cluster(session))["physical_partitions"]
                if len(parts) >= self.physical_partitions and all(
                    p.get("online") and p.get("leader")
                    and len(p.get("in_sync_replicas", [])) >= self.replication_factor
                    for p in parts
                ):
                    return time.monotonic() - started
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"platform not healthy after {timeout_s:.0f}s")
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------------ disks
    def node_index(self, node_id: str) -> int:
        return int(node_id.lstrip("w"))

    def partition_dir(self, node_id: str, pp: int) -> Path:
        return self.data_dir / f"write-node-{self.node_index(node_id)}" / "partitions" / f"pp-{pp:05d}"

    def partition_files(self, node_id: str, pp: int) -> list[Path]:
        d = self.partition_dir(node_id, pp)
        return sorted(d.glob("*.log")) if d.is_dir() else []

    def wipe(self, node_id: str) -> None:
        shutil.rmtree(self.data_dir / f"write-node-{self.node_index(node_id)}", ignore_errors=True)


def batch_starts(path: Path) -> list[tuple[int, int, int]]:
    """(position, base offset, next offset) of each whole batch of a segment file."""
    data = path.read_bytes()
    out: list[tuple[int, int, int]] = []
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        fields = HEADER.unpack_from(data, pos)
        size = LENGTH_END + fields[1]
        if size <= LENGTH_END or pos + size > len(data):
            break
        out.append((pos, fields[0], fields[0] + fields[8]))
        pos += size
    return out


def cut_unsynced_tail(path: Path, acked_end: int, rng: random.Random) -> int:
    """Cut ``path`` at a random byte at or after the first batch that starts at or past
    ``acked_end`` (what no acknowledgement needed: it may not have been fsynced), as a
    power loss may. A batch holding any offset below ``acked_end`` is kept whole: the
    produce path merges several requests into one batch, and one acknowledged request
    proves the whole batch was fsynced. Returns the bytes cut."""
    size = path.stat().st_size
    floor = size
    for pos, base, _nxt in batch_starts(path):
        if base >= acked_end:
            floor = pos
            break
    if floor >= size:
        return 0
    cut = rng.randint(floor, size)
    os.truncate(path, cut)
    return size - cut


def flip_bit(path: Path, rng: random.Random) -> int | None:
    """Flip one random bit of ``path``; the byte position, None when it is empty."""
    size = path.stat().st_size
    if size == 0:
        return None
    pos = rng.randrange(size)
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([b ^ (1 << rng.randrange(8))]))
    return pos
