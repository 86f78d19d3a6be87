"""Figures of the platform benchmarks (``vpq bench produce|latency|drain``). Pure.

* :func:`window_rate`: the steady rate of a run from the times its events happened,
  measured between the ``lo`` and ``hi`` quantiles of those events, so the ramp-up at
  the start and the stragglers at the end do not count (the same rule for every run
  compared, so ratios of such rates are fair).
* :func:`requests_in_window`: what a closed-loop produce run achieved between two
  instants: the messages of the requests that *completed* in the window and the
  latencies of the requests that both started and completed in it.
* :func:`message_identity` / :func:`owner_of_key`: how the benchmarks name message
  ``i`` (key and per-key sequence number) and which of ``workers`` sender tasks owns a
  key (one owner per key keeps each key's produce order).
* :func:`speedup_and_efficiency`: the drain figures (``efficiency = speedup / n``).
* :func:`median_of_runs`: the headline figures of repeated runs (``--runs N``);
  :func:`median_or_none` of figures some runs could not measure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from vpq.load.payload import key_name


def window_rate(times: Sequence[float], lo: float = 0.1, hi: float = 0.9) -> float:
    """Events per second between the ``lo`` and ``hi`` quantiles of ``times`` (any order,
    seconds on one clock). 0.0 with fewer than two events in the window or when they
    all happened at one instant. ``ValueError`` unless ``0 <= lo < hi <= 1``."""
    if not 0.0 <= lo < hi <= 1.0:
        raise ValueError("need 0 <= lo < hi <= 1")
    if len(times) < 2:
        return 0.0
    ordered = sorted(times)
    last = len(ordered) - 1
    i = math.floor(lo * last)
    j = math.ceil(hi * last)
    if j <= i:
        return 0.0
    span = ordered[j] - ordered[i]
    return (j - i) / span if span > 0 else 0.0


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One produce request: when it was sent and answered (seconds), how many messages
    it carried and whether it succeeded."""

    started: float
    ended: float
    messages: int
    ok: bool = True


@dataclass(frozen=True)
class WindowFigures:
    """What :func:`requests_in_window` found."""

    messages: int
    requests: int
    errors: int
    seconds: float
    latencies: list[float]

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0


def requests_in_window(records: Sequence[RequestRecord], start: float, end: float) -> WindowFigures:
    """Successful requests completed in ``[start, end)`` give the message count; those
    that also started at or after ``start`` give the latencies (a request that straddles
    the start is partly warm-up). Failed requests completed in the window count as
    errors. ``ValueError`` when ``end <= start``."""
    if end <= start:
        raise ValueError("the window must have a positive length")
    messages = requests = errors = 0
    latencies: list[float] = []
    for rec in records:
        if not start <= rec.ended < end:
            continue
        if not rec.ok:
            errors += 1
            continue
        messages += rec.messages
        requests += 1
        if rec.started >= start:
            latencies.append(rec.ended - rec.started)
    return WindowFigures(messages, requests, errors, end - start, latencies)


def message_identity(index: int, keys: int) -> tuple[str, int]:
    """Message ``index`` of a run over ``keys`` keys: key ``index mod keys``, sequence
    number ``index // keys`` (so each key's messages are numbered 0, 1, 2, ...)."""
    if index < 0 or keys < 1:
        raise ValueError("index must be >= 0 and keys >= 1")
    return key_name(index % keys), index // keys


def owner_of_key(index: int, keys: int, workers: int) -> int:
    """The sender task (0..workers-1) that produces every message of the key of message
    ``index``: ``(index mod keys) mod workers``."""
    if workers < 1:
        raise ValueError("workers must be >= 1")
    return (index % keys) % workers


def speedup_and_efficiency(rate_one: float, rate_many: float, consumers: int) -> tuple[float, float]:
    """``speedup = rate_many / rate_one`` and ``efficiency = speedup / consumers``
    (both 0.0 when the single-consumer rate is 0). ``ValueError`` for ``consumers < 1``."""
    if consumers < 1:
        raise ValueError("consumers must be >= 1")
    if rate_one <= 0:
        return 0.0, 0.0
    speedup = rate_many / rate_one
    return speedup, speedup / consumers


def spread(counts: Sequence[int]) -> dict[str, float | int]:
    """``min``, ``max`` and ``mean`` of per-member counts (all 0 when there are none)."""
    if not counts:
        return {"min": 0, "max": 0, "mean": 0.0}
    return {"min": min(counts), "max": max(counts), "mean": round(sum(counts) / len(counts), 2)}


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (the mean of the two middle ones for an even count).
    ``ValueError`` for no values."""
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[mid])
    return (ordered[mid - 1] + ordered[mid]) / 2.0


def median_or_none(values: Sequence[float | None], digits: int = 1) -> float | None:
    """The median of the values that are not ``None`` (rounded), ``None`` when none is."""
    known = [v for v in values if v is not None]
    return round(median(known), digits) if known else None


def median_of_runs(runs: Sequence[dict[str, object]], fields: Sequence[str]) -> dict[str, float | None]:
    """Per field, the median over ``runs`` of its numeric values (``None`` when no run
    has a number there; booleans are not numbers here)."""
    out: dict[str, float | None] = {}
    for name in fields:
        nums = [
            float(v) for r in runs
            if isinstance(v := r.get(name), (int, float)) and not isinstance(v, bool)
        ]
        out[name] = round(median(nums), 3) if nums else None
    return out
