"""The results of a run as Markdown tables (what docs/benchmarks.md shows). Pure.

One table per scenario that ran (absolute figures and check verdicts per system),
then one table of vpq/peer ratios per scenario. Systems that were skipped are listed
with their reason; a figure a system did not produce is shown as ``-``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vpq.load.report import check_totals, lower_is_better


def _n(value: Any, digits: int = 0) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "-"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def _verdict(result: Any) -> str:
    t = check_totals(result)
    if t["checks"] == 0:
        return "-"
    if t["failed"] == 0:
        return f"ok ({t['checks']})"
    return f"FAILED: lost {t['lost']}, dup {t['duplicates']}, reordered {t['reordered']}, unexpected {t['unexpected']}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _ok(per_system: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {n: r for n, r in per_system.items() if isinstance(r, Mapping) and r.get("status") != "error"}


def _errors(per_system: Mapping[str, Any]) -> list[str]:
    return [f"* {n}: {r.get('error', '')}" for n, r in per_system.items() if isinstance(r, Mapping) and r.get("status") == "error"]


def _s1(res: Mapping[str, Mapping[str, Any]]) -> list[str]:
    rows = []
    for n, r in res.items():
        b1, b100 = r.get("batch_1", {}), r.get("batch_100", {})
        rows.append([n, _n(b1.get("msgs_per_s")), _n(b100.get("msgs_per_s")), _n(b100.get("mib_per_s"), 1),
                     _n(b1.get("client_cpu"), 2) + " / " + _n(b100.get("client_cpu"), 2), _verdict(r)])
    return _table(["system", "batch 1 msg/s", "batch 100 msg/s", "batch 100 MiB/s", "client CPU b1 / b100", "checks"], rows)


def _s2(res: Mapping[str, Mapping[str, Any]]) -> list[str]:
    rows = []
    for n, r in res.items():
        ack, e2e = r.get("produce_ack", {}), r.get("end_to_end", {})
        rows.append([n, _n(r.get("rate_per_s")), "yes" if r.get("sustained") else "no",
                     f"{_n(ack.get('p50_ms'), 2)} / {_n(ack.get('p99_ms'), 2)}",
                     f"{_n(e2e.get('p50_ms'), 2)} / {_n(e2e.get('p99_ms'), 2)}", _verdict(r)])
    return _table(["system", "rate msg/s", "kept up", "produce ack p50 / p99 ms", "end to end p50 / p99 ms", "checks"], rows)


def _s3(res: Mapping[str, Mapping[str, Any]]) -> list[str]:
    steps_all = sorted({s["queues"] for r in res.values() for s in r.get("steps", [])})
    rows = []
    for n, r in res.items():
        by = {s["queues"]: s for s in r.get("steps", [])}
        cells = []
        for q in steps_all:
            s = by.get(q)
            if s is None:
                cells.append("-")
                continue
            made = "" if s.get("creation_complete", True) else f" ({s.get('created')} created)"
            unread = ", read-back refused" if s.get("readback_error") else ""
            cells.append(_n(s.get("msgs_per_s")) + made + unread)
        last = by.get(steps_all[-1], {}) if steps_all else {}
        created = last.get("created") or 0
        deleted = last.get("deleted") or 0
        create_ms = 1000.0 * last["create_s"] / created if created and "create_s" in last else None
        delete_ms = 1000.0 * last["delete_s"] / deleted if deleted and "delete_s" in last else None
        rss = last.get("rss_delta_per_queue")
        paired = last.get("paired_1q") or {}
        pair = f"{_n(paired.get('msgs_per_s'))} ({_n(paired.get('ratio'), 2)})" if paired else "-"
        rows.append([n, *cells, pair, _n(create_ms, 2), _n(delete_ms, 2),
                     _n(rss / 1024.0 if isinstance(rss, (int, float)) else None, 1), _verdict(r)])
    last_q = _n(steps_all[-1]) if steps_all else "last"
    header = ["system", *[f"{_n(q)} queues msg/s" for q in steps_all],
              f"paired 1 queue msg/s (ratio @{last_q})", f"create ms/queue @{last_q}",
              f"delete ms/queue @{last_q}", f"RSS KiB/queue @{last_q}", "checks"]
    return _table(header, rows)


def _s4(res: Mapping[str, Mapping[str, Any]]) -> list[str]:
    counts = sorted({s["consumers"] for r in res.values() for m in ("ordered", "unordered") for s in r.get(m, [])})
    rows = []
    for n, r in res.items():
        for mode in ("ordered", "unordered"):
            by = {s["consumers"]: s for s in r.get(mode, [])}
            if not by:
                continue
            top = by.get(counts[-1], {}) if counts else {}
            rows.append([n, mode, *[_n(by.get(c, {}).get("msgs_per_s")) for c in counts], _n(top.get("efficiency"), 2),
                         _verdict(r.get(mode))])
    header = ["system", "order", *[f"{c} consumers msg/s" for c in counts], f"efficiency @{counts[-1] if counts else '-'}",
              "checks"]
    return _table(header, rows)


def _s5(res: Mapping[str, Mapping[str, Any]]) -> list[str]:
    rows = []
    for n, r in res.items():
        idle, during = r.get("idle", {}), r.get("catchup", {})
        rows.append([n, _n(r.get("in_queue_at_start")), f"{_n(idle.get('p50_ms'), 2)} / {_n(idle.get('p99_ms'), 2)}",
                     f"{_n(during.get('p50_ms'), 2)} / {_n(during.get('p99_ms'), 2)}",
                     _n(r.get("p99_ratio_catchup_vs_idle"), 2), _n(r.get("reader_msgs_per_s")), _verdict(r)])
    return _table(["system", "backlog", "idle p50 / p99 ms", "during catch-up p50 / p99 ms", "p99 ratio",
                   "reader msg/s", "checks"], rows)


TABLES = {"1": _s1, "2": _s2, "3": _s3, "4": _s4, "5": _s5}


def _ratio_table(ratios: Mapping[str, Mapping[str, float]]) -> list[str]:
    peers = list(ratios)
    metrics: list[str] = []
    for figures in ratios.values():
        metrics += [m for m in figures if m not in metrics]
    rows = [[m + (" (lower is better)" if lower_is_better(m) else ""), *[_n(ratios[p].get(m), 2) for p in peers]]
            for m in metrics]
    return _table(["metric", *[f"vpq/{p}" for p in peers]], rows)


def results_markdown(results: Mapping[str, Any]) -> str:
    """Markdown for a results dict written by :func:`load.harness.run_harness`."""
    out: list[str] = []
    systems = results.get("systems", {})
    skipped = [f"{n} ({s.get('reason', '')})" for n, s in systems.items() if not s.get("available")]
    out.append(f"Run of {results.get('started_at', '?')}, mode `{results.get('mode', '?')}`, "
               f"{results.get('elapsed_s', '?')} s; measured: "
               + ", ".join(n for n, s in systems.items() if s.get("available")) + ".")
    if skipped:
        out.append("")
        out.append("Skipped: " + "; ".join(skipped) + ".")
    for number, entry in results.get("scenarios", {}).items():
        per_system = entry.get("systems", {})
        out += ["", f"### {number}. {entry.get('title', '')}", ""]
        ok = _ok(per_system)
        if ok and number in TABLES:
            out += TABLES[number](ok)
        out += _errors(per_system)
        if entry.get("ratios_vpq_over_peer"):
            out += ["", *_ratio_table(entry["ratios_vpq_over_peer"])]
    return "\n".join(out) + "\n"
