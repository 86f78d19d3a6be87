"""``common.counter_table.CounterTable`` exposes what a labelled prometheus Counter would."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from vpq.common.counter_table import CounterTable


def _samples(text: bytes) -> list[str]:
    """Every line but the ``_created`` ones (a table keeps no creation time), sorted."""
    return sorted(line for line in text.decode().splitlines() if "_created" not in line)


def test_same_series_as_a_labelled_counter() -> None:
    ref_registry, table_registry = CollectorRegistry(), CollectorRegistry()
    ref = Counter("vpq_x", "things", ["queue", "partition"], registry=ref_registry)
    table = CounterTable("vpq_x", "things", ["queue", "partition"])
    table_registry.register(table)  # type: ignore[arg-type]
    for queue, pp, n in [("a", "0", 3), ("b", "1", 2), ("a", "0", 4), ("a", "1", 1.5)]:
        ref.labels(queue, pp).inc(n)
        table.inc((queue, pp), n)
    assert _samples(generate_latest(table_registry)) == _samples(generate_latest(ref_registry))
    assert 'vpq_x_total{partition="0",queue="a"} 7.0' in _samples(generate_latest(table_registry))
    assert table.value(("a", "0")) == 7 and len(table) == 3
