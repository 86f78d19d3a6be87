"""Headline figures, vpq/peer ratios, check totals and the printed summary of a
benchmark run. Pure: works on the results dict the harness builds.

A scenario's result for one system is the dict its ``run`` returned (or
``{"status": "error", ...}``). ``headline`` picks the few figures the issue's goals
talk about; ``ratios`` divides vpq's headline figures by each peer's. A metric named
``*_ms``, ``*_ratio`` or ``*_kib`` is better when lower, every other one when higher.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

CHECK_FIELDS = ("lost", "duplicates", "reordered", "unexpected")


def lower_is_better(metric: str) -> bool:
    return metric.endswith(("_ms", "_ratio", "_kib"))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def headline(scenario: int, result: Mapping[str, Any]) -> dict[str, float]:
    """The headline figures of one system's result of ``scenario`` (missing ones left out)."""
    out: dict[str, float | None] = {}
    if result.get("status") == "error":
        return {}
    if scenario == 1:
        for b in (1, 100):
            out[f"batch_{b}_msgs_per_s"] = _num((result.get(f"batch_{b}") or {}).get("msgs_per_s"))
    elif scenario == 2:
        e2e = result.get("end_to_end") or {}
        ack = result.get("produce_ack") or {}
        out["e2e_p50_ms"] = _num(e2e.get("p50_ms"))
        out["e2e_p99_ms"] = _num(e2e.get("p99_ms"))
        out["ack_p99_ms"] = _num(ack.get("p99_ms"))
    elif scenario == 3:
        steps = result.get("steps") or []
        for step in steps:
            out[f"msgs_per_s@{step['queues']}q"] = _num(step.get("msgs_per_s"))
        if len(steps) >= 2:
            first, last = _num(steps[0].get("msgs_per_s")), _num(steps[-1].get("msgs_per_s"))
            if first and last is not None:
                out[f"throughput_{steps[-1]['queues']}q_vs_{steps[0]['queues']}q"] = round(last / first, 3)
        if steps:
            last_step = steps[-1]
            n = last_step["queues"]
            out[f"throughput_{n}q_vs_1q_paired"] = _num((last_step.get("paired_1q") or {}).get("ratio"))
            created = last_step.get("created") or 0
            if created:
                out[f"create_per_queue@{n}q_ms"] = round(1000.0 * last_step["create_s"] / created, 3)
            per_queue = _num(last_step.get("rss_delta_per_queue"))
            if per_queue is not None:
                out[f"rss_per_queue@{n}q_kib"] = round(per_queue / 1024.0, 2)
    elif scenario == 4:
        for mode in ("ordered", "unordered"):
            steps = result.get(mode) or []
            for step in steps:
                out[f"{mode}_msgs_per_s@{step['consumers']}c"] = _num(step.get("msgs_per_s"))
            if steps:
                out[f"{mode}_efficiency@{steps[-1]['consumers']}c"] = _num(steps[-1].get("efficiency"))
    elif scenario == 5:
        out["idle_p99_ms"] = _num((result.get("idle") or {}).get("p99_ms"))
        out["catchup_p99_ms"] = _num((result.get("catchup") or {}).get("p99_ms"))
        out["p99_catchup_vs_idle_ratio"] = _num(result.get("p99_ratio_catchup_vs_idle"))
        out["reader_msgs_per_s"] = _num(result.get("reader_msgs_per_s"))
    return {k: v for k, v in out.items() if v is not None}


def _floor(metric: str) -> float:
    """Smallest peer value a ratio is taken against: memory deltas below 1 KiB per queue
    are measurement noise (RSS moves in pages), anything else must be positive."""
    return 1.0 if metric.endswith("_kib") else 1e-12


def ratios(headlines: Mapping[str, Mapping[str, float]], reference: str = "vpq") -> dict[str, dict[str, float]]:
    """``{peer: {metric: reference / peer}}`` for every metric both have (peer value above
    the metric's noise floor)."""
    ref = headlines.get(reference)
    if not ref:
        return {}
    out: dict[str, dict[str, float]] = {}
    for peer, figures in headlines.items():
        if peer == reference:
            continue
        common = {m: round(ref[m] / v, 3) for m, v in figures.items() if m in ref and v >= _floor(m)}
        if common:
            out[peer] = common
    return out


def iter_checks(node: Any) -> Iterator[Mapping[str, Any]]:
    """Every check report (a dict with ``lost`` and ``duplicates``) inside a result."""
    if isinstance(node, Mapping):
        if "lost" in node and "duplicates" in node and "expected" in node:
            yield node
            return
        for value in node.values():
            yield from iter_checks(value)
    elif isinstance(node, list):
        for value in node:
            yield from iter_checks(value)


def check_totals(result: Any) -> dict[str, int]:
    """Sums of lost/duplicates/reordered/unexpected over every check in ``result``, how
    many checks ran and how many failed. ``reordered`` counts runs that required per-key
    order; reorderings in unordered runs are counted apart (``reordered_where_allowed``)."""
    totals = {f: 0 for f in CHECK_FIELDS}
    totals["reordered_where_allowed"] = 0
    totals["checks"] = 0
    totals["failed"] = 0
    for check in iter_checks(result):
        totals["checks"] += 1
        for f in CHECK_FIELDS:
            if f == "reordered" and not check.get("order_required", True):
                totals["reordered_where_allowed"] += int(check.get(f, 0))
            else:
                totals[f] += int(check.get(f, 0))
        if not check.get("ok", True):
            totals["failed"] += 1
    return totals


def _fmt(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def scenario_lines(number: int, title: str, per_system: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Printable lines for one scenario: each system's headline figures and check totals,
    then the vpq/peer ratios."""
    lines = [f"scenario {number}: {title}"]
    heads: dict[str, dict[str, float]] = {}
    for name, result in per_system.items():
        if result.get("status") == "error":
            lines.append(f"  {name:<14} ERROR {result.get('error', '')}")
            continue
        heads[name] = headline(number, result)
        figures = ", ".join(f"{m}={_fmt(v)}" for m, v in heads[name].items())
        t = check_totals(result)
        verdict = "ok" if t["failed"] == 0 else "FAILED"
        lines.append(
            f"  {name:<14} {figures}  | checks {verdict}: lost {t['lost']}, dup {t['duplicates']}, "
            f"reordered {t['reordered']}, unexpected {t['unexpected']}"
        )
    table = ratios(heads)
    if not table:
        lines.append("  ratios vpq/peer: n/a (vpq not measured)" if "vpq" not in heads else "  ratios: no peer measured")
    for peer, figures in table.items():
        shown = ", ".join(f"{m}={v:.2f}{'↓' if lower_is_better(m) else ''}" for m, v in figures.items())
        lines.append(f"  vpq/{peer:<10} {shown}")
    return lines
