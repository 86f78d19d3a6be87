"""Hands callbacks from I/O threads to one event loop, several per loop wake-up.

``CompletionRelay.of(loop)`` is the one relay of ``loop`` (made on first use, dropped
with the loop). ``post(fn, *args)``, from any thread, queues the call; the loop runs
every queued call, in post order, in one callback scheduled with
``call_soon_threadsafe``, which is only asked for when none is pending. So the group
commits of several partitions that complete close together cost the loop one wake-up
and the I/O threads one ``call_soon_threadsafe`` between them, instead of one each.

Contract:
- calls posted by one thread run in the order that thread posted them, on the loop's
  thread, each exactly once (unless the loop closes first);
- a call that raises ``Exception`` is reported to the loop's exception handler and
  the calls after it still run;
- ``post`` raises ``RuntimeError`` when the loop is closed (as ``call_soon_threadsafe``).

The relay also keeps when the loop's committers last finished a write
(``note_io``, from any thread): ``io_quiet_for(s)`` tells a committer whether the
loop has been without disk completions for ``s`` seconds, the one case where it
may write on the loop thread itself (``group_commit``).
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

_RELAYS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, CompletionRelay] = weakref.WeakKeyDictionary()
_RELAYS_LOCK = threading.Lock()


class CompletionRelay:
    """Callbacks from other threads, run on one loop in batches (see the module doc)."""

    __slots__ = ("_loop", "_lock", "_calls", "_scheduled", "_last_io", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)  # not a strong one: the registry must not keep the loop alive
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., object], tuple[Any, ...]]] = []
        self._scheduled = False  # a drain is queued on the loop and has not taken the calls yet
        self._last_io = -1e9  # time.monotonic() of the last note_io

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> CompletionRelay:
        """The relay of ``loop`` (shared by every caller on that loop)."""
        relay = _RELAYS.get(loop)
        if relay is None:
            with _RELAYS_LOCK:
                relay = _RELAYS.get(loop)
                if relay is None:
                    relay = _RELAYS[loop] = cls(loop)
        return relay

    def note_io(self) -> None:
        """A committer of this loop finished a write now (any thread)."""
        self._last_io = time.monotonic()

    def io_quiet_for(self, seconds: float) -> bool:
        """True when no ``note_io`` came in the last ``seconds`` (never when ``seconds`` <= 0)."""
        return seconds > 0 and time.monotonic() - self._last_io >= seconds

    def post(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon (thread-safe)."""
        with self._lock:
            self._calls.append((fn, args))
            if self._scheduled:
                return
            self._scheduled = True
        loop = self._loop()
        if loop is None:
            raise RuntimeError("the relay's event loop is gone")
        loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
            self._scheduled = False
        for fn, args in calls:
            try:
                fn(*args)
            except Exception as exc:
                loop = self._loop()
                if loop is None:  # pragma: no cover - a drain runs on its loop
                    raise
                loop.call_exception_handler(
                    {"message": f"exception in relayed callback {fn!r}", "exception": exc}
                )
