"""The Markdown tables of a results dict."""

from __future__ import annotations

from vpq.load.markdown import results_markdown


def _check(lost: int = 0) -> dict[str, object]:
    return {"expected": 5, "delivered": 5 - lost, "distinct": 5 - lost, "lost": lost, "duplicates": 0,
            "reordered": 0, "unexpected": 0, "order_required": True, "ok": lost == 0}


RESULTS = {
    "started_at": "2026-01-01T00:00:00+00:00",
    "mode": "quick",
    "elapsed_s": 12.5,
    "systems": {"vpq": {"available": True}, "redis": {"available": True},
                "rabbitmq": {"available": False, "reason": "rabbitmq: connection refused"}},
    "scenarios": {
        "1": {
            "title": "produce",
            "systems": {
                "vpq": {"batch_1": {"msgs_per_s": 300.0, "client_cpu": 0.2, "check": _check()},
                        "batch_100": {"msgs_per_s": 9000.0, "mib_per_s": 8.8, "client_cpu": 0.3, "check": _check()}},
                "redis": {"batch_1": {"msgs_per_s": 100.0, "check": _check(lost=2)},
                          "batch_100": {"msgs_per_s": 3000.0, "check": _check()}},
            },
            "ratios_vpq_over_peer": {"redis": {"batch_1_msgs_per_s": 3.0, "batch_100_msgs_per_s": 3.0}},
        },
        "3": {
            "title": "queues",
            "systems": {
                "vpq": {"steps": [
                    {"queues": 1, "created": 1, "creation_complete": True, "msgs_per_s": 100.0, "create_s": 0.01,
                     "deleted": 1, "delete_s": 0.01, "check": _check()},
                    {"queues": 100, "created": 40, "creation_complete": False, "msgs_per_s": 90.0, "create_s": 2.0,
                     "deleted": 40, "delete_s": 1.0, "rss_delta_per_queue": 2048, "check": _check(),
                     "readback_error": "ServerError: too many open files"},
                ]},
                "redis": {"status": "error", "error": "TimeoutError: timed out"},
            },
            "ratios_vpq_over_peer": {},
        },
    },
}


def test_tables_verdicts_skips_and_ratios() -> None:
    md = results_markdown(RESULTS)
    assert "mode `quick`" in md and "measured: vpq, redis." in md
    assert "Skipped: rabbitmq (rabbitmq: connection refused)." in md
    assert "### 1. produce" in md and "### 3. queues" in md
    assert "| vpq | 300 | 9,000 | 8.8 | 0.20 / 0.30 | ok (2) |" in md
    assert "| redis | 100 | 3,000 | - | - / - | FAILED: lost 2, dup 0, reordered 0, unexpected 0 |" in md
    assert "| batch_1_msgs_per_s | 3.00 |" in md
    assert "90 (40 created), read-back refused" in md and "| 50.00 | 25.00 | 2.0 | ok (2) |" in md
    assert "* redis: TimeoutError: timed out" in md
