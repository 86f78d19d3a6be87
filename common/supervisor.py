"""Process supervision for ``vpq up``: start child processes, restart the ones
that crash (with backoff), stop them all cleanly.

Each child is its own OS process with its output appended to ``<log_dir>/<name>.log``.
On Linux every child gets PR_SET_PDEATHSIG=SIGKILL, so a SIGKILLed supervisor
leaves no orphans behind.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except OSError:
            pass


@dataclass
class ChildSpec:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    restart: bool = True
    stop_timeout_s: float = 10.0


@dataclass
class _Child:
    spec: ChildSpec
    proc: asyncio.subprocess.Process | None = None
    restarts: int = 0
    started_at: float = 0.0
    watcher: asyncio.Task | None = field(default=None, repr=False)


class Supervisor:
    """Starts children in the given order, restarts crashed ones, stops in reverse order."""

    def __init__(
        self,
        log_dir: Path,
        on_event: Callable[[str], None] = lambda _msg: None,
        backoff_initial_s: float = 0.5,
        backoff_max_s: float = 10.0,
    ) -> None:
        self._log_dir = log_dir
        self._on_event = on_event
        self._backoff_initial = backoff_initial_s
        self._backoff_max = backoff_max_s
        self._children: dict[str, _Child] = {}
        self._stopping = False

    # -- lifecycle -------------------------------------------------------
    async def start_child(self, spec: ChildSpec) -> int:
        """Start one child now and watch it; returns its pid."""
        if spec.name in self._children:
            raise ValueError(f"child {spec.name!r} already exists")
        child = _Child(spec)
        self._children[spec.name] = child
        await self._spawn(child)
        child.watcher = asyncio.create_task(self._watch(child), name=f"supervise-{spec.name}")
        assert child.proc is not None
        return child.proc.pid

    async def stop(self) -> None:
        """SIGTERM every child (reverse start order), SIGKILL those that outlive their timeout."""
        self._stopping = True
        for child in reversed(list(self._children.values())):
            if child.watcher:
                child.watcher.cancel()
            await self._terminate(child)
        for child in self._children.values():
            if child.watcher:
                try:
                    await child.watcher
                except asyncio.CancelledError:
                    pass
        self._children.clear()

    def pid(self, name: str) -> int | None:
        child = self._children.get(name)
        if child is None or child.proc is None or child.proc.returncode is not None:
            return None
        return child.proc.pid

    def restarts(self, name: str) -> int:
        return self._children[name].restarts

    def names(self) -> list[str]:
        return list(self._children)

    # -- internals -------------------------------------------------------
    async def _spawn(self, child: _Child) -> None:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self._log_dir / f"{child.spec.name}.log"
        env = dict(os.environ)
        if child.spec.env:
            env.update(child.spec.env)
        with open(log_path, "ab") as log:
            child.proc = await asyncio.create_subprocess_exec(
                *child.spec.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                preexec_fn=_die_with_parent,
            )
        child.started_at = time.monotonic()
        self._on_event(f"started {child.spec.name} (pid {child.proc.pid})")

    async def _watch(self, child: _Child) -> None:
        delay = self._backoff_initial
        while True:
            assert child.proc is not None
            rc = await child.proc.wait()
            if self._stopping:
                return
            self._on_event(f"{child.spec.name} exited with {rc}; see {self._log_dir / (child.spec.name + '.log')}")
            if not child.spec.restart:
                return
            if time.monotonic() - child.started_at > 30:
                delay = self._backoff_initial  # it ran fine for a while: not a crash loop
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._backoff_max)
            if self._stopping:
                return
            child.restarts += 1
            await self._spawn(child)

    async def _terminate(self, child: _Child) -> None:
        proc = child.proc
        if proc is None or proc.returncode is not None:
            return
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            await asyncio.wait_for(proc.wait(), child.spec.stop_timeout_s)
        except asyncio.TimeoutError:
            self._on_event(f"{child.spec.name} did not stop in {child.spec.stop_timeout_s}s; killing it")
            proc.kill()
            await proc.wait()
        self._on_event(f"stopped {child.spec.name}")
