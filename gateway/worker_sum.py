"""What the workers of one gateway answer as one gateway (pure, no I/O).

A gateway started with ``gateway.workers`` > 1 is several processes sharing its port
(``gateway.worker_peers``); each counts only what it answered. These functions add the
workers' shares up, so ``/metrics`` and a queue's ``traffic`` read as they would from a
single process:

* :func:`sum_expositions`: Prometheus text (the classic format ``generate_latest``
  writes, no timestamps) of several workers -> one text. A series (the sample name with
  its labels, exactly as written) is the sum of its values over the texts; a
  ``*_created`` series (a creation time) is the earliest instead. Families keep the
  order in which they first appear, each with the ``# HELP``/``# TYPE`` lines of the
  first text that has it, and its series in first-seen order.
* :func:`sum_traffic`: several ``TrafficMeter.figures`` dicts of one queue -> one:
  totals and rates add up, ``by_virtual_partition`` adds up position by position,
  ``since_ms`` is the earliest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client.utils import floatToGoString

_CREATED = "_created"


def _series_name(series: str) -> str:
    cut = series.find("{")
    return series if cut < 0 else series[:cut]


def sum_expositions(texts: Sequence[str]) -> str:
    """One exposition holding, per series, the sum over ``texts`` (see the module
    docstring); a sample line that does not parse is left out."""
    headers: dict[str, list[str]] = {}  # family -> its # lines, from the first text having it
    owner: dict[str, int] = {}  # family -> the index of that text
    series_of: dict[str, list[str]] = {}  # family -> its series, first-seen order
    values: dict[str, float] = {}
    for index, text in enumerate(texts):
        family = ""
        for line in text.splitlines():
            if not line:
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    family = parts[2]
                    if family not in owner:
                        owner[family] = index
                        headers[family] = []
                        series_of[family] = []
                    if owner[family] == index:
                        headers[family].append(line)
                continue
            series, _, raw = line.rpartition(" ")
            try:
                value = float(raw)
            except ValueError:
                continue
            if not series:
                continue
            if family not in owner:  # samples before any header
                owner[family] = index
                headers[family] = []
                series_of[family] = []
            old = values.get(series)
            if old is None:
                series_of[family].append(series)
                values[series] = value
            elif _series_name(series).endswith(_CREATED):
                values[series] = min(old, value)
            else:
                values[series] = old + value
    out: list[str] = []
    for family, lines in headers.items():
        out.extend(lines)
        out.extend(f"{s} {floatToGoString(values[s])}" for s in series_of[family])
    return "\n".join(out) + "\n" if out else ""


def sum_traffic(figures: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One queue's traffic figures from its workers' (at least one)."""
    if not figures:
        raise ValueError("no figures to add up")
    out = dict(figures[0])
    for field in ("messages_total", "bytes_total", "messages_per_s", "bytes_per_s"):
        out[field] = sum(f.get(field, 0) for f in figures)
    out["since_ms"] = min(f.get("since_ms", 0) for f in figures)
    by_vp: list[int] = []
    for f in figures:
        other = f.get("by_virtual_partition") or []
        if len(other) > len(by_vp):
            by_vp.extend([0] * (len(other) - len(by_vp)))
        for i, n in enumerate(other):
            by_vp[i] += n
    out["by_virtual_partition"] = by_vp
    return out
