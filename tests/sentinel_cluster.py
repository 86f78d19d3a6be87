"""A real Sentinel-managed Redis for tests: a master, one replica, three Sentinels.

Every process is a real ``redis-server`` / ``redis-sentinel`` on a free port of
127.0.0.1, with its files under the test's tmp directory. The master keeps an AOF
fsynced on every write (what docs/sentinel.md recommends). Sentinels: quorum 2,
``down-after-milliseconds`` 1000, ``failover-timeout`` 3000, so a killed master is
replaced within a few seconds. ``start()`` returns once every Sentinel knows the
replica and the two other Sentinels (a failover needs both).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.needs import missing
from vpq.common.redis_server import RedisServer, find_redis_server, free_port

MASTER_NAME = "vpqmeta"


def sentinel_command(conf: Path) -> list[str] | None:
    """``redis-sentinel <conf>``, else ``redis-server <conf> --sentinel``, else None."""
    binary = shutil.which("redis-sentinel")
    if binary:
        return [binary, str(conf)]
    server = find_redis_server()
    return [server, str(conf), "--sentinel"] if server else None


@dataclass
class SentinelCluster:
    base: Path
    down_after_ms: int = 1000
    failover_timeout_ms: int = 3000
    master: RedisServer | None = None
    replica: RedisServer | None = None
    sentinel_ports: list[int] = field(default_factory=list)
    sentinels: list[subprocess.Popen] = field(default_factory=list)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{MASTER_NAME}"

    def start(self, timeout_s: float = 30.0) -> None:
        if find_redis_server() is None or sentinel_command(Path("x")) is None:
            missing("needs redis-server and redis-sentinel (apt-get install redis-server redis-sentinel)")
        fast_sync = ("--repl-diskless-sync-delay", "0")
        self.master = RedisServer(self.base / "master", appendonly=True, appendfsync="always", extra_args=fast_sync)
        self.master.start()
        self.replica = RedisServer(
            self.base / "replica", appendonly=True, appendfsync="always",
            extra_args=("--replicaof", "127.0.0.1", str(self.master.port), *fast_sync),
        )
        self.replica.start()
        for i in range(3):
            port = free_port()
            directory = self.base / f"sentinel{i}"
            directory.mkdir(parents=True, exist_ok=True)
            conf = directory / "sentinel.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {directory}\ndaemonize no\nprotected-mode no\n"
                f"logfile sentinel.log\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master.port} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}\n"
                f"sentinel failover-timeout {MASTER_NAME} {self.failover_timeout_ms}\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n"
            )
            argv = sentinel_command(conf)
            assert argv is not None
            self.sentinels.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL))
            self.sentinel_ports.append(port)
        self.wait_ready(timeout_s)

    def _sentinel(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=1, decode_responses=True)

    def wait_ready(self, timeout_s: float) -> None:
        """Until every Sentinel sees the master, its replica and two other Sentinels."""
        deadline = time.monotonic() + timeout_s
        last = None
        while time.monotonic() < deadline:
            try:
                states = []
                for port in self.sentinel_ports:
                    with self._sentinel(port) as s:
                        states.append(s.sentinel_master(MASTER_NAME))
                last = [(st["num-slaves"], st["num-other-sentinels"]) for st in states]
                if all(st["num-slaves"] >= 1 and st["num-other-sentinels"] >= 2 for st in states):
                    return
            except redis.RedisError as exc:
                last = exc
            time.sleep(0.2)
        raise TimeoutError(f"Sentinels not ready after {timeout_s}s: {last}")

    def master_port(self) -> int:
        """The master's port as the Sentinels report it now."""
        with self._sentinel(self.sentinel_ports[0]) as s:
            return int(s.sentinel_get_master_addr_by_name(MASTER_NAME)[1])

    def kill_master(self) -> None:
        """SIGKILL the current master (the original one)."""
        assert self.master is not None
        self.master.kill()

    def stop(self) -> None:
        for proc in self.sentinels:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        self.sentinels.clear()
        for server in (self.replica, self.master):
            if server is not None:
                if server.proc is not None and server.proc.poll() is None:
                    server.proc.send_signal(signal.SIGCONT)
                server.stop()
