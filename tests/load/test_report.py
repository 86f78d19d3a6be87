"""Headline figures, vpq/peer ratios and check totals of a results dict."""

from __future__ import annotations

from vpq.load.report import check_totals, headline, lower_is_better, ratios, scenario_lines


def _check(**bad: int) -> dict[str, object]:
    base = {"expected": 10, "delivered": 10, "distinct": 10, "lost": 0, "duplicates": 0, "reordered": 0,
            "unexpected": 0, "order_required": True}
    base.update(bad)
    base["ok"] = not any(bad.values())
    return base


def test_direction_of_metrics() -> None:
    assert lower_is_better("e2e_p99_ms") and lower_is_better("p99_catchup_vs_idle_ratio")
    assert lower_is_better("rss_per_queue@10q_kib")
    assert not lower_is_better("batch_100_msgs_per_s")


def test_headlines_per_scenario() -> None:
    s1 = {"batch_1": {"msgs_per_s": 100.0}, "batch_100": {"msgs_per_s": 1000.0}}
    assert headline(1, s1) == {"batch_1_msgs_per_s": 100.0, "batch_100_msgs_per_s": 1000.0}
    s3 = {"steps": [
        {"queues": 1, "msgs_per_s": 1000.0, "created": 1, "create_s": 0.01},
        {"queues": 100, "msgs_per_s": 900.0, "created": 100, "create_s": 0.5, "rss_delta_per_queue": 2048},
    ]}
    h3 = headline(3, s3)
    assert h3["msgs_per_s@100q"] == 900.0
    assert h3["throughput_100q_vs_1q"] == 0.9
    assert h3["create_per_queue@100q_ms"] == 5.0
    assert h3["rss_per_queue@100q_kib"] == 2.0
    s4 = {"ordered": [{"consumers": 1, "msgs_per_s": 95.0, "efficiency": 1.0},
                      {"consumers": 4, "msgs_per_s": 300.0, "efficiency": 0.79}]}
    assert headline(4, s4) == {"ordered_msgs_per_s@1c": 95.0, "ordered_msgs_per_s@4c": 300.0,
                               "ordered_efficiency@4c": 0.79}
    assert headline(2, {"status": "error", "error": "x"}) == {}


def test_ratios_are_vpq_over_each_peer_on_common_metrics() -> None:
    heads = {"vpq": {"a": 30.0, "b_ms": 2.0, "only_vpq": 1.0}, "redis": {"a": 10.0, "b_ms": 4.0},
             "nats": {"a": 0.0, "c": 1.0}}
    assert ratios(heads) == {"redis": {"a": 3.0, "b_ms": 0.5}}
    assert ratios({"redis": {"a": 1.0}}) == {}


def test_check_totals_find_every_check() -> None:
    results = {
        "1": {"systems": {"redis": {"batch_1": {"check": _check()}, "batch_100": {"check": _check(lost=2)}}}},
        "3": {"systems": {"nats": {"steps": [{"check": _check(duplicates=1)}, {"check": _check()}]}}},
    }
    totals = check_totals(results)
    assert totals == {"lost": 2, "duplicates": 1, "reordered": 0, "unexpected": 0, "reordered_where_allowed": 0,
                      "checks": 4, "failed": 2}
    unordered = _check(reordered=3)
    unordered["order_required"] = False
    unordered["ok"] = True
    totals = check_totals({"x": {"check": unordered}})
    assert totals["reordered"] == 0 and totals["reordered_where_allowed"] == 3 and totals["failed"] == 0


def test_scenario_lines_show_checks_errors_and_ratios() -> None:
    per_system = {
        "vpq": {"batch_1": {"msgs_per_s": 300.0, "check": _check()}, "batch_100": {"msgs_per_s": 9000.0}},
        "redis": {"batch_1": {"msgs_per_s": 100.0, "check": _check(reordered=1)}, "batch_100": {"msgs_per_s": 3000.0}},
        "nats": {"status": "error", "error": "timed out"},
    }
    text = "\n".join(scenario_lines(1, "produce", per_system))
    assert "redis" in text and "FAILED" in text and "reordered 1" in text
    assert "nats" in text and "ERROR timed out" in text
    assert "vpq/redis" in text and "batch_100_msgs_per_s=3.00" in text
    without_vpq = "\n".join(scenario_lines(1, "produce", {"redis": per_system["redis"]}))
    assert "n/a (vpq not measured)" in without_vpq


def test_memory_ratios_ignore_peers_below_the_noise_floor() -> None:
    heads = {"vpq": {"rss_per_queue@1000q_kib": 16.0}, "redis": {"rss_per_queue@1000q_kib": 0.01},
             "nats": {"rss_per_queue@1000q_kib": 32.0}}
    assert ratios(heads) == {"nats": {"rss_per_queue@1000q_kib": 0.5}}
