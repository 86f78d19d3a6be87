"""TrafficCounter: counts a write node's appends into aligned time windows.

The write node calls ``record(...)`` for each appended batch and, from time to
time (e.g. every second), ``drain(now_ms)``; every window that has ended by
then comes back once, in order, INCLUDING idle windows (empty row lists), so
the node hands each to ``StatsWriter.write_window`` and its heartbeat keeps the
job's completeness check honest. Windows are aligned to multiples of
``window_ms`` (epoch ms) so the windows of all nodes line up.

A record whose time falls in an already drained window (clock went backwards)
is counted in the oldest open window. Pure logic, no I/O, not thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable

from vpq.traffic.stats_schema import TrafficRow

_Key = tuple[str, int, int, str, str]
MAX_CHECKED_NAMES = 200_000


class TrafficCounter:
    """Per-window (queue, vp, V, lane, env) -> (messages, bytes) counters."""

    def __init__(self, window_ms: int, start_ms: int) -> None:
        """Count from the window containing ``start_ms`` (the node's start time)."""
        if not isinstance(window_ms, int) or window_ms < 1:
            raise ValueError(f"window_ms must be an int >= 1, got {window_ms!r}")
        if not isinstance(start_ms, int) or start_ms < 0:
            raise ValueError(f"start_ms must be an int >= 0, got {start_ms!r}")
        self.window_ms = window_ms
        self._open_from = start_ms - start_ms % window_ms
        self._windows: dict[int, dict[_Key, list[int]]] = {}
        # names already validated (a name never changes validity): each queue name and
        # (lane, env) pair is checked the first time it is seen, not for every new key or
        # window (with thousands of queues that check was most of what a new queue cost a
        # write node); bounded, then started over
        self._names: set[str] = set()
        self._contexts: set[tuple[str, str]] = set()

    def _window_of(self, t_ms: int) -> int:
        return max(t_ms - t_ms % self.window_ms, self._open_from)

    def record(
        self,
        t_ms: int,
        queue: str,
        vp: int,
        virtual_partitions: int,
        messages: int,
        nbytes: int,
        lane: str = "",
        env: str = "prod",
    ) -> None:
        """Count ``messages`` messages of ``nbytes`` payload bytes appended at ``t_ms``
        (``ValueError`` for a row ``TrafficRow`` would refuse, nothing counted)."""
        refused = self.record_many(t_ms, ((queue, vp, virtual_partitions, lane, env, messages, nbytes),))
        if refused:
            raise ValueError(refused[0])

    def record_many(self, t_ms: int, rows: Iterable[tuple[str, int, int, str, str, int, int]]) -> list[str]:
        """``record`` for every ``(queue, vp, V, lane, env, messages, nbytes)`` of ``rows``,
        all appended at ``t_ms`` (one window lookup for the lot: a write node counts a
        whole batch at once). A row ``record`` would refuse is skipped, the others are
        counted; the answer holds one message per skipped row (queue, vp and why)."""
        w = self._windows.setdefault(self._window_of(t_ms), {})
        refused: list[str] = []
        for queue, vp, v, lane, env, messages, nbytes in rows:
            key = (queue, vp, v, lane, env)
            c = w.get(key)
            try:
                if messages < 0 or nbytes < 0:
                    raise ValueError("messages and bytes must be >= 0")
                if c is None:
                    self._check(queue, vp, v, lane, env)
                    w[key] = [messages, nbytes]
                    continue
            except ValueError as exc:
                refused.append(f"{queue} vp {vp}: {exc}")
                continue
            c[0] += messages
            c[1] += nbytes
        return refused

    def _check(self, queue: str, vp: int, virtual_partitions: int, lane: str, env: str) -> None:
        """What ``TrafficRow`` checks, names once each (``ValueError``)."""
        if queue not in self._names or (lane, env) not in self._contexts:
            TrafficRow(queue, vp, virtual_partitions, lane, env)  # names, V and vp range
            if len(self._names) >= MAX_CHECKED_NAMES:
                self._names.clear()
            self._names.add(queue)
            self._contexts.add((lane, env))
            return
        if type(vp) is not int or type(virtual_partitions) is not int or not 0 <= vp < virtual_partitions:
            raise ValueError(f"vp {vp!r} out of range [0, {virtual_partitions!r}) for queue {queue!r}")
        if virtual_partitions & (virtual_partitions - 1) or virtual_partitions > 1 << 32:
            raise ValueError(f"virtual_partitions must be a power of two, got {virtual_partitions}")

    def drain(self, now_ms: int) -> list[tuple[int, list[TrafficRow]]]:
        """Every window ended by ``now_ms`` and not drained before, oldest first, as
        ``(window_start_ms, rows)`` with rows sorted by (queue, vp, V, lane, env): the key
        tuples' own order, so the sort compares tuples in C (a window of 10,000 busy queues
        holds some 100,000 keys)."""
        out: list[tuple[int, list[TrafficRow]]] = []
        counted = TrafficRow.counted  # every key was checked by record()
        while self._open_from + self.window_ms <= now_ms:
            start = self._open_from
            counts = self._windows.pop(start, {})
            rows = [counted(q, vp, v, lane, env, c[0], c[1]) for (q, vp, v, lane, env), c in sorted(counts.items())]
            out.append((start, rows))
            self._open_from = start + self.window_ms
        return out
