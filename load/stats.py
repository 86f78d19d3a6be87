"""Latency statistics and open-loop schedules. Pure.

Open loop: message ``i`` of a run at ``rate`` messages/s is *scheduled* at
``start + i / rate``, whatever happened to the earlier ones. Its latency is measured
from that scheduled time, not from the moment the sender got round to it, so a
stalled sender or a slow server shows up in the figures instead of silently lowering
the offered load (no coordinated omission).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) with linear interpolation between closest ranks
    (numpy's default). ``ValueError`` for no values or ``q`` outside 0..100."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError("q must be within 0..100")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return float(ordered[lo])
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """``count``, ``p50``, ``p90``, ``p99``, ``max`` and ``mean`` of latencies given in
    seconds, reported in milliseconds (rounded to µs). Empty input: count 0 only."""
    if not seconds:
        return {"count": 0}
    ms = [s * 1000.0 for s in seconds]
    return {
        "count": len(ms),
        "p50_ms": round(percentile(ms, 50), 3),
        "p90_ms": round(percentile(ms, 90), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "max_ms": round(max(ms), 3),
        "mean_ms": round(sum(ms) / len(ms), 3),
    }


@dataclass(frozen=True)
class OpenLoopSchedule:
    """``count`` sends at ``rate_per_s``: send ``i`` is due ``offset(i)`` seconds after start."""

    rate_per_s: float
    duration_s: float

    def __post_init__(self) -> None:
        if self.rate_per_s <= 0 or self.duration_s <= 0:
            raise ValueError("rate and duration must be > 0")

    @property
    def count(self) -> int:
        return max(1, int(self.rate_per_s * self.duration_s))

    def offset(self, i: int) -> float:
        if not 0 <= i < self.count:
            raise IndexError(i)
        return i / self.rate_per_s

    def offsets(self) -> list[float]:
        return [i / self.rate_per_s for i in range(self.count)]


def latencies_from_schedule(scheduled: Sequence[float], done: Sequence[float]) -> list[float]:
    """Per message ``done[i] - scheduled[i]`` (seconds). Both sequences are absolute times
    on one clock; ``ValueError`` when their lengths differ or a message is done before it
    was scheduled (a clock mix-up, not a fast system)."""
    if len(scheduled) != len(done):
        raise ValueError("scheduled and done differ in length")
    out: list[float] = []
    for s, d in zip(scheduled, done):
        if d < s:
            raise ValueError(f"done at {d} before scheduled at {s}")
        out.append(d - s)
    return out


def rate(count: int, seconds: float) -> float:
    """Messages per second, 0 for an empty or instantaneous run."""
    return count / seconds if seconds > 0 and count > 0 else 0.0
