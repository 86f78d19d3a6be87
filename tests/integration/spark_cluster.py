"""A Spark standalone cluster (one master, one worker) from the installed pyspark, for
integration tests: ``yield from SparkCluster(tmp_dir).running()``; with
``running(wait=False)`` the JVMs boot while the test starts other things, and
``wait_ready()`` waits for them.

Both run ``<pyspark>/bin/spark-class`` in their own process group (SIGKILLed at the
end), bound to 127.0.0.1 on free ports, with logs and the worker's directory under
``tmp_dir``. ``state()`` is the master's JSON (``http://127.0.0.1:<webui>/json/``):
workers, active and completed applications.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tests.needs import spark_home
from vpq.common.redis_server import free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


@dataclass
class SparkCluster:
    tmp_dir: Path
    worker_cores: int = 1
    worker_memory: str = "512m"
    port: int = 0
    webui_port: int = 0
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def state(self) -> dict:
        return requests.get(f"http://127.0.0.1:{self.webui_port}/json/", timeout=5).json()

    def _spawn(self, name: str, *args: str) -> None:
        home = spark_home()
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.tmp_dir / "local"),
            "SPARK_LOG_DIR": str(self.tmp_dir / "logs"),
        }
        log = open(self.tmp_dir / f"{name}.out", "ab")
        try:
            self.procs.append(
                subprocess.Popen(
                    [str(home / "bin" / "spark-class"), *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        finally:
            log.close()

    def _wait(self, what: str, ready, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"a Spark process exited with {p.returncode}:\n{self.output()}")
            try:
                if ready(self.state()):
                    return
            except (requests.RequestException, ValueError):
                pass
            time.sleep(0.3)
        raise TimeoutError(f"Spark standalone {what} not ready after {timeout_s} s:\n{self.output()}")

    def start_master(self) -> None:
        """Spawn the master without waiting for it (``wait_ready`` waits and adds the worker)."""
        self.tmp_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.webui_port = self.webui_port or free_port()
        self._spawn(
            "master", MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui_port)
        )

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Wait for the master, then start the worker and wait until it registered."""
        self._wait("master", lambda s: s.get("status") == "ALIVE", timeout_s)
        if len(self.procs) < 2:
            self._spawn(
                "worker", WORKER_CLASS, self.master_url, "--host", "127.0.0.1", "--cores", str(self.worker_cores),
                "--memory", self.worker_memory, "--webui-port", "0", "--work-dir", str(self.tmp_dir / "work"),
            )
        self._wait("worker", lambda s: s.get("aliveworkers", 0) >= 1, timeout_s)

    def output(self) -> str:
        return "".join(
            f"\n--- {p.name} ---\n" + p.read_text(errors="replace")[-3000:] for p in sorted(self.tmp_dir.glob("*.out"))
        )

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        self.procs.clear()

    def running(self, wait: bool = True) -> Iterator[SparkCluster]:
        """Start (without ``wait``: only spawn the master, the caller calls ``wait_ready``
        when it needs the cluster), yield the cluster, then kill it: the whole body of a
        fixture."""
        try:
            self.start_master()
            if wait:
                self.wait_ready()
            yield self
        finally:
            self.stop()
