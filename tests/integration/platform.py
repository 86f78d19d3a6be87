"""Run a real ``vpq up`` (its own process group) for integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

from vpq.common.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Platform:
    data_dir: Path
    write_nodes: int = 1
    read_nodes: int = 1
    physical_partitions: int = 4
    replication_factor: int = 1
    min_insync: int = 0
    redis_url: str | None = None
    port: int = 0
    env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 90.0) -> None:
        if self.port == 0:
            self.port = free_port()
        argv = [
            sys.executable, "-m", "vpq.cli.main", "up",
            "--data-dir", str(self.data_dir),
            "--port", str(self.port),
            "--write-nodes", str(self.write_nodes),
            "--read-nodes", str(self.read_nodes),
            "--physical-partitions", str(self.physical_partitions),
            *self.extra_args,
        ]
        if self.replication_factor > 1:
            argv += ["--replication-factor", str(self.replication_factor)]
        if self.min_insync:
            argv += ["--min-insync", str(self.min_insync)]
        if self.redis_url:
            argv += ["--redis-url", self.redis_url]
        env = dict(os.environ)
        env.update(self.env)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.data_dir / "up.out", "ab")
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.wait_ready(timeout_s)

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"vpq up exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if requests.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"vpq up not ready after {timeout_s}s:\n{self.output()}")

    def node_headers(self) -> dict[str, str]:
        """The headers a direct call to one of this platform's nodes needs (its cluster secret)."""
        from vpq.common.cluster_secret import load_cluster_secret
        from vpq.common.runfiles import cluster_secret_path
        from vpq.node_rpc.cluster_auth import client_headers

        return client_headers(load_cluster_secret(cluster_secret_path(self.data_dir)))

    def output(self) -> str:
        text = (self.data_dir / "up.out").read_text(errors="replace")[-4000:]
        logs = self.data_dir / "logs"
        if logs.is_dir():
            for log in sorted(logs.glob("*.log")):
                text += f"\n--- {log.name} ---\n" + log.read_text(errors="replace")[-2500:]
        return text

    def children(self, module: str) -> list[psutil.Process]:
        """Live child processes running ``python -m <module>``."""
        if self.proc is None:
            return []
        found = []
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                if module in child.cmdline():
                    found.append(child)
            except psutil.NoSuchProcess:
                continue
        return found

    def kill_all(self) -> None:
        """SIGKILL the supervisor and every child: a crash of the whole platform."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc = None
        self._log.close()

    def running(self) -> Iterator[Platform]:
        """Start, yield the platform, then stop it (SIGKILL when a clean stop fails): the
        whole body of a fixture, ``yield from Platform(...).running()``."""
        self.start()
        try:
            yield self
        finally:
            try:
                self.stop()
            except Exception:
                self.kill_all()

    def stop(self, timeout_s: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # nothing may outlive the supervisor
        except ProcessLookupError:
            pass
        self.proc = None
        self._log.close()
        return rc
