"""Start and stop a vpq platform (``vpq up``) for the benchmark when none is running.

``VpqProcess.start()`` runs ``<venv>/bin/vpq up --data-dir DIR --host 127.0.0.1 --port P
--physical-partitions K [extra_args]`` (with ``env`` added to the environment) as a child in its own session (so its node processes form
one process group), with its output in ``DIR/vpq-up.log``, and waits until
``/readyz`` answers 200. It raises :class:`VpqProcessError` (with the end of the log)
when the command exits, keeps restarting crashed nodes (:func:`crash_looping`), or is
not ready in time. ``stop()`` sends SIGTERM to the child
(``vpq up`` stops its nodes cleanly) and, after ``timeout_s``, SIGKILL to the group it
started. Only that group is ever signalled.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from vpq.common.redis_server import free_port
from vpq.sdk.client import AsyncClient

LOG_NAME = "vpq-up.log"
# ``vpq up`` restarts crashed nodes; this many "exited with" lines before ready: give up
CRASH_LINES_LIMIT = 6


def crash_looping(log_text: str, limit: int = CRASH_LINES_LIMIT) -> bool:
    """True when the supervisor's log reports at least ``limit`` node exits."""
    return sum(1 for line in log_text.splitlines() if " exited with " in line) >= limit


class VpqProcessError(RuntimeError):
    pass


def vpq_binary() -> Path:
    """The ``vpq`` script next to the running interpreter (``.venv/bin/vpq``)."""
    return Path(sys.executable).parent / "vpq"


class VpqProcess:
    """One ``vpq up`` child (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        physical_partitions: int = 8,
        host: str = "127.0.0.1",
        binary: Path | None = None,
        extra_args: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.port = port
        self.physical_partitions = physical_partitions
        self.host = host
        self.binary = binary or vpq_binary()
        self.extra_args = list(extra_args or [])
        self.env = dict(env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def command(self) -> list[str]:
        if self.port == 0:
            self.port = free_port(self.host)
        return [
            str(self.binary), "up",
            "--data-dir", str(self.data_dir),
            "--host", self.host,
            "--port", str(self.port),
            "--physical-partitions", str(self.physical_partitions),
            *self.extra_args,
        ]

    def log_text(self) -> str:
        try:
            return (self.data_dir / LOG_NAME).read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 4) -> str:
        return " | ".join(self.log_text().strip().splitlines()[-lines:])

    async def start(self, timeout_s: float = 60.0) -> None:
        if not self.binary.exists():
            raise VpqProcessError(f"{self.binary} not found")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = self.command()
        self._log = open(self.data_dir / LOG_NAME, "ab")
        env = {**os.environ, **self.env} if self.env else None
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
            env=env,
        )
        deadline = time.monotonic() + timeout_s
        async with AsyncClient(self.url, timeout=2.0) as client:
            while True:
                if self.proc.poll() is not None:
                    code = self.proc.returncode
                    self.stop()
                    raise VpqProcessError(f"`{' '.join(argv[:2])} ...` exited with {code}: {self.log_tail()}")
                if await client.readyz():
                    return
                if crash_looping(self.log_text()):
                    self.stop()
                    raise VpqProcessError(f"vpq up keeps restarting crashed nodes: {self.log_tail()}")
                if time.monotonic() >= deadline:
                    self.stop()
                    raise VpqProcessError(f"vpq up not ready on {self.url} within {timeout_s:g}s: {self.log_tail()}")
                await asyncio.sleep(0.2)

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL to the child's own process group after ``timeout_s``."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group this process started (its nodes)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
