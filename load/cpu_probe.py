"""How fast, and how steady, the machine's CPU is right now: a figure that goes with every
benchmark result, since a shared virtual machine's speed changes from hour to hour.

:func:`probe_cpu` times a fixed unit of pure Python work (``UNIT_ITERATIONS`` additions)
over and over for ``seconds``, with a short sleep between units (so it measures the CPU a
waking process gets, not a process that holds a core), and :func:`summarize_units` reads
the unit times:

* ``unit_p50_ms``: the machine's speed (lower is faster; comparable only between runs of
  this same probe);
* ``stalls``: units that took more than ``STALL_FACTOR`` times the median, i.e. moments
  when the process got a small share of a CPU (the machine lent it elsewhere);
  ``stalls_per_min`` and ``worst_ms`` go with it.

A benchmark whose figures move between runs can be checked against these: a high
``unit_p50_ms`` is a slow phase of the machine, frequent stalls a noisy one.
:func:`summarize_units` and :func:`machine_line` are pure.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

UNIT_ITERATIONS = 20_000
STALL_FACTOR = 3.0
PAUSE_S = 0.004
PROBE_S = 1.0
"""The seconds a benchmark spends on the probe before its run and again after it."""


def _unit() -> int:
    total = 0
    for i in range(UNIT_ITERATIONS):
        total += i
    return total


def summarize_units(durations_ms: Sequence[float], seconds: float) -> dict[str, Any]:
    """The figures of the module docstring from each unit's duration in ms, measured over
    ``seconds``. Pure."""
    if not durations_ms:
        return {"units": 0, "seconds": round(seconds, 2)}
    ordered = sorted(durations_ms)
    median = statistics.median(ordered)
    stalls = sum(1 for d in durations_ms if d > STALL_FACTOR * median)
    return {
        "units": len(ordered),
        "seconds": round(seconds, 2),
        "unit_p50_ms": round(median, 3),
        "unit_p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
        "worst_ms": round(ordered[-1], 3),
        "stalls": stalls,
        "stalls_per_min": round(stalls * 60.0 / seconds, 1) if seconds > 0 else 0.0,
    }


def probe_cpu(
    seconds: float = PROBE_S, *, clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep
) -> dict[str, Any]:
    """Time units of work for ``seconds`` (blocking: call it before a run, or in a
    thread) and summarize them (:func:`summarize_units`)."""
    if seconds < 0:
        raise ValueError("seconds must be >= 0")
    durations: list[float] = []
    start = clock()
    end = start + seconds
    while True:
        t = clock()
        if t >= end:
            break
        _unit()
        durations.append((clock() - t) * 1000.0)
        sleep(PAUSE_S)
    return summarize_units(durations, clock() - start)


def machine_line(before: dict[str, Any], after: dict[str, Any]) -> str:
    """One line for a benchmark's output: the probe before and after the run. Pure."""

    def one(p: dict[str, Any]) -> str:
        if not p.get("units"):
            return "not measured"
        return f"unit {p['unit_p50_ms']:.2f} ms, {p['stalls_per_min']:g} stalls/min (worst {p['worst_ms']:.1f} ms)"

    return f"CPU probe before: {one(before)}; after: {one(after)} (lower unit time is a faster machine)"
