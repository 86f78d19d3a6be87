"""Per-queue produce traffic as seen by this gateway process (pure, clock injected).

``TrafficMeter.record(queue, messages, nbytes)`` counts what this process appended;
``figures(queue)`` answers the ``QueueTraffic`` shape: ``messages_total``/``bytes_total``
since ``since_ms`` (the meter's start), ``messages_per_s``/``bytes_per_s`` over the
last ``window_s`` seconds (one-second buckets) and ``by_virtual_partition``, the
messages counted per virtual partition since ``since_ms`` (index = vp; given when
``record`` was told the vps). The cluster-wide statistics live in the
write nodes' traffic files (``spark_rebalance``); these figures are this gateway's share,
which is everything in a single-gateway deployment. Not thread-safe (one event loop).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from typing import Any


class _QueueTraffic:
    __slots__ = ("messages", "nbytes", "buckets", "by_vp")

    def __init__(self) -> None:
        self.messages = 0
        self.nbytes = 0
        self.by_vp: list[int] = []
        self.buckets: deque[list[int]] = deque()  # [second, messages, bytes], oldest first


class TrafficMeter:
    def __init__(self, window_s: int = 10, clock: Callable[[], float] = time.time, max_queues: int = 100_000) -> None:
        if window_s < 1:
            raise ValueError("window_s must be >= 1")
        self._window_s = window_s
        self._clock = clock
        self._max_queues = max_queues
        self._since_ms = int(clock() * 1000)
        self._queues: dict[str, _QueueTraffic] = {}

    def record(self, queue: str, messages: int, nbytes: int, vps: Sequence[int] | None = None) -> None:
        """Count ``messages`` messages of ``nbytes`` payload bytes appended to ``queue``;
        ``vps``: the virtual partition of each (counted per vp when given)."""
        t = self._queues.get(queue)
        if t is None:
            if len(self._queues) >= self._max_queues:
                return
            t = self._queues[queue] = _QueueTraffic()
        t.messages += messages
        t.nbytes += nbytes
        if vps:
            per = t.by_vp
            for vp, n in Counter(vps).items():
                if vp >= len(per):
                    per.extend([0] * (vp + 1 - len(per)))
                per[vp] += n
        second = int(self._clock())
        if t.buckets and t.buckets[-1][0] == second:
            t.buckets[-1][1] += messages
            t.buckets[-1][2] += nbytes
        else:
            t.buckets.append([second, messages, nbytes])
            self._trim(t, second)

    def _trim(self, t: _QueueTraffic, now_s: int) -> None:
        while t.buckets and t.buckets[0][0] <= now_s - self._window_s:
            t.buckets.popleft()

    def forget(self, queue: str) -> None:
        """Drop a deleted queue's figures."""
        self._queues.pop(queue, None)

    def all_figures(self) -> dict[str, dict[str, Any]]:
        """``figures`` of every queue counted so far, by name."""
        return {name: self.figures(name) for name in list(self._queues)}

    def figures(self, queue: str) -> dict[str, Any]:
        """``{"messages_total", "bytes_total", "messages_per_s", "bytes_per_s", "since_ms",
        "scope": "gateway", "by_virtual_partition"}``."""
        t = self._queues.get(queue)
        out: dict[str, Any] = {
            "messages_total": 0,
            "bytes_total": 0,
            "messages_per_s": 0.0,
            "bytes_per_s": 0.0,
            "since_ms": self._since_ms,
            "scope": "gateway",
            "by_virtual_partition": [],
        }
        if t is None:
            return out
        self._trim(t, int(self._clock()))
        out["messages_total"] = t.messages
        out["bytes_total"] = t.nbytes
        out["messages_per_s"] = sum(b[1] for b in t.buckets) / self._window_s
        out["bytes_per_s"] = sum(b[2] for b in t.buckets) / self._window_s
        out["by_virtual_partition"] = list(t.by_vp)
        return out
