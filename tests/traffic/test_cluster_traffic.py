"""traffic/cluster_traffic.py: the per-queue produce meter (pure, clock injected)."""

from __future__ import annotations

from vpq.traffic.cluster_traffic import TrafficMeter


def test_totals_and_windowed_rates() -> None:
    now = [1000.0]
    meter = TrafficMeter(window_s=10, clock=lambda: now[0])
    assert meter.figures("q")["messages_total"] == 0 and meter.figures("q")["since_ms"] == 1_000_000
    meter.record("q", 10, 1000)
    now[0] = 1001.5
    meter.record("q", 10, 1000)
    meter.record("other", 1, 1)
    f = meter.figures("q")
    assert (f["messages_total"], f["bytes_total"]) == (20, 2000)
    assert (f["messages_per_s"], f["bytes_per_s"]) == (2.0, 200.0)
    now[0] = 1010.2  # the first second left the window
    assert meter.figures("q")["messages_per_s"] == 1.0
    now[0] = 1100.0
    f = meter.figures("q")
    assert f["messages_per_s"] == 0.0 and f["messages_total"] == 20
    meter.forget("q")
    assert meter.figures("q")["messages_total"] == 0
    assert meter.figures("other")["messages_total"] == 1


def test_meter_bounds_the_number_of_queues() -> None:
    meter = TrafficMeter(max_queues=2)
    for name in ("a", "b", "c"):
        meter.record(name, 1, 1)
    assert [meter.figures(n)["messages_total"] for n in ("a", "b", "c")] == [1, 1, 0]


def test_messages_are_counted_per_virtual_partition_when_given() -> None:
    meter = TrafficMeter(window_s=10, clock=lambda: 1000.0)
    meter.record("q", 4, 40, [2, 0, 2, 2])
    meter.record("q", 2, 20)  # vps unknown: only the totals move
    meter.record("q", 2, 20, [5, 0])
    f = meter.figures("q")
    assert f["by_virtual_partition"] == [2, 0, 3, 0, 0, 1] and f["messages_total"] == 8
    assert meter.figures("other")["by_virtual_partition"] == []


def test_all_figures_names_every_counted_queue() -> None:
    now = [1000.0]
    m = TrafficMeter(window_s=10, clock=lambda: now[0])
    assert m.all_figures() == {}
    m.record("a", 2, 20)
    m.record("b", 1, 5, [3])
    assert m.all_figures() == {"a": m.figures("a"), "b": m.figures("b")}
    m.forget("a")
    assert list(m.all_figures()) == ["b"]
