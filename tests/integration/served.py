"""Roles run by ``vpq serve`` as real processes, each on its own loopback address
(127.0.0.2, 127.0.0.3, ...: Linux routes all of 127/8 to ``lo``) with its own data
directory, against one real redis-server: a several-host layout on one machine.

``Served(root, redis_url, env, secret_file)`` starts roles (every one given
``--cluster-secret-file`` when ``secret_file`` is set) with ``write_node``/``read_node``/``gateway``
(each waits until the role registered in Redis, or answers ``/readyz`` for a gateway,
and fails with the role's output if it exits first), ``refused(...)`` runs a start that
must exit, ``registered(role)`` reads node id -> address from Redis, ``close()`` stops
every role (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
import requests

from tests.integration.platform import ROOT
from vpq.common.redis_server import free_port
from vpq.metadata.keys import Keys

VPQ = [sys.executable, "-m", "vpq.cli.main", "serve"]


@dataclass
class Role:
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str]
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv, cwd=ROOT, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL: a crash of this role."""
        if self.proc is not None:
            with _gone():
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def stop(self, timeout_s: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        with _gone():
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout_s)
        finally:
            self.kill()
        return rc


class _gone:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        return kind is ProcessLookupError


@dataclass
class Served:
    root: Path
    redis_url: str
    env: dict[str, str] = field(default_factory=dict)
    secret_file: Path | None = None
    roles: list[Role] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._redis = redis.Redis.from_url(self.redis_url, decode_responses=True)
        self._keys = Keys("vpq")

    def _role(self, name: str, argv: list[str]) -> Role:
        env = {**os.environ, **self.env}
        if self.secret_file is not None:
            argv = [*argv, "--cluster-secret-file", str(self.secret_file)]
        role = Role(name, argv, self.root / "logs" / f"{name}.log", env)
        self.roles.append(role)
        return role

    def data_dir(self, name: str) -> Path:
        return self.root / name

    def write_node(self, node_id: str, host: str, *args: str, wait: bool = True) -> Role:
        argv = [*VPQ, "write-node", "--redis-url", self.redis_url, "--data-dir", str(self.data_dir(node_id)),
                "--node-id", node_id, "--bind", host, *args]  # fmt: skip
        role = self._role(node_id, argv)
        role.start()
        if wait:
            self.wait_registered(role, "write")
        return role

    def read_node(self, node_id: str, host: str, *args: str) -> Role:
        argv = [*VPQ, "read-node", "--redis-url", self.redis_url, "--data-dir", str(self.data_dir(node_id)),
                "--node-id", node_id, "--bind", host, *args]  # fmt: skip
        role = self._role(node_id, argv)
        role.start()
        self.wait_registered(role, "read")
        return role

    def gateway(self, name: str, host: str, *args: str, wait: bool = True) -> tuple[Role, str]:
        """A gateway on a free port of ``host``; with ``wait``, once it answers ``/readyz``."""
        port = free_port(host)
        argv = [*VPQ, "gateway", "--redis-url", self.redis_url, "--data-dir", str(self.data_dir(name)),
                "--bind", f"{host}:{port}", *args]  # fmt: skip
        role = self._role(name, argv)
        role.start()
        url = f"http://{host}:{port}"
        if wait:
            self.wait_ready(role, url)
        return role, url

    def wait_ready(self, role: Role, url: str, timeout_s: float = 60.0) -> None:
        self._wait(role, lambda: _ready(url), f"{url}/readyz", timeout_s)

    def refused(self, role: str, *args: str) -> subprocess.CompletedProcess:
        """Run ``vpq serve <role> --redis-url URL ...`` that must exit by itself."""
        return subprocess.run(
            [*VPQ, role, "--redis-url", self.redis_url, *args], cwd=ROOT, env={**os.environ, **self.env},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    def registered(self, role: str) -> dict[str, str]:
        """node id -> registered address, of the live nodes of ``role``."""
        import json

        live = set(self._redis.zrangebyscore(self._keys.nodes(role), int(time.time() * 1000), "+inf"))
        info = self._redis.hgetall(self._keys.node_info(role))
        return {n: json.loads(v)["address"] for n, v in info.items() if n in live}

    def wait_registered(self, role: Role, kind: str, timeout_s: float = 60.0) -> None:
        self._wait(role, lambda: role.name in self.registered(kind), f"{role.name} registered as {kind}", timeout_s)

    def _wait(self, role: Role, done, what: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not role.alive():
                raise RuntimeError(f"{role.name} exited before {what}:\n{role.output()}")
            if done():
                return
            time.sleep(0.1)
        raise TimeoutError(f"no {what} after {timeout_s}s:\n{role.output()}")

    def close(self) -> None:
        for role in reversed(self.roles):
            try:
                role.stop()
            except Exception:
                role.kill()
        self._redis.close()


def _ready(url: str) -> bool:
    try:
        return requests.get(url + "/readyz", timeout=1).status_code == 200
    except requests.RequestException:
        return False
