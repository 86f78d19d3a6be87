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

from spark_rebalance.stats_schema import TrafficRow

_Key = tuple[str, int, int, str, str]
MAX_CHECKED_KEYS = 200_000


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
        # keys already validated (names and ranges never change validity): a key is checked
        # the first time it is seen, not in every window; bounded, then started over
        self._checked: set[_Key] = set()

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
        """Count ``messages`` messages of ``nbytes`` payload bytes appended at ``t_ms``."""
        if messages < 0 or nbytes < 0:
            raise ValueError("messages and bytes must be >= 0")
        w = self._windows.setdefault(self._window_of(t_ms), {})
        key = (queue, vp, virtual_partitions, lane, env)
        c = w.get(key)
        if c is None:
            if key not in self._checked:
                TrafficRow(queue, vp, virtual_partitions, lane, env)  # validates the key
                if len(self._checked) >= MAX_CHECKED_KEYS:
                    self._checked.clear()
                self._checked.add(key)
            w[key] = [messages, nbytes]
        else:
            c[0] += messages
            c[1] += nbytes

    def drain(self, now_ms: int) -> list[tuple[int, list[TrafficRow]]]:
        """Every window ended by ``now_ms`` and not drained before, oldest first, as
        ``(window_start_ms, rows)`` with rows sorted by (queue, vp, lane, env)."""
        out: list[tuple[int, list[TrafficRow]]] = []
        while self._open_from + self.window_ms <= now_ms:
            start = self._open_from
            counts = self._windows.pop(start, {})
            rows = [
                TrafficRow.counted(q, vp, v, lane, env, c[0], c[1])  # every key was checked by record()
                for (q, vp, v, lane, env), c in sorted(counts.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][3], kv[0][4], kv[0][2]))
            ]
            out.append((start, rows))
            self._open_from = start + self.window_ms
        return out
