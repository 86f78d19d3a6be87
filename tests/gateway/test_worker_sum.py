"""gateway.worker_sum: the workers' shares add up to what one process would show."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from vpq.gateway.worker_sum import sum_expositions, sum_traffic


def _registry_text(requests: dict[str, int], latencies: list[float], in_flight: int) -> tuple[str, CollectorRegistry]:
    r = CollectorRegistry()
    c = Counter("vpq_gateway_requests", "HTTP requests answered", ["route"], registry=r)
    h = Histogram("vpq_gateway_request_seconds", "time", ["route"], buckets=(0.01, 0.1, 1.0), registry=r)
    g = Gauge("vpq_gateway_in_flight_requests", "requests being answered", registry=r)
    for route, n in requests.items():
        c.labels(route).inc(n)
    for s in latencies:
        h.labels("/p").observe(s)
    g.set(in_flight)
    return generate_latest(r).decode(), r


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_counters_histograms_and_gauges_add_up_and_created_is_the_earliest():
    a, _ = _registry_text({"/p": 3, "/q": 1}, [0.005, 0.5], 2)
    b, _ = _registry_text({"/p": 4}, [0.05], 1)
    total = _samples(sum_expositions([a, b]))
    assert total[("vpq_gateway_requests_total", (("route", "/p"),))] == 7
    assert total[("vpq_gateway_requests_total", (("route", "/q"),))] == 1
    assert total[("vpq_gateway_in_flight_requests", ())] == 3
    assert total[("vpq_gateway_request_seconds_count", (("route", "/p"),))] == 3
    assert total[("vpq_gateway_request_seconds_bucket", (("le", "0.01"), ("route", "/p")))] == 1
    assert total[("vpq_gateway_request_seconds_bucket", (("le", "0.1"), ("route", "/p")))] == 2
    assert total[("vpq_gateway_request_seconds_sum", (("route", "/p"),))] == pytest.approx(0.555)
    created_a = _samples(a)[("vpq_gateway_requests_created", (("route", "/p"),))]
    created_b = _samples(b)[("vpq_gateway_requests_created", (("route", "/p"),))]
    assert total[("vpq_gateway_requests_created", (("route", "/p"),))] == min(created_a, created_b)


def test_a_series_only_one_worker_has_lands_in_its_family_with_one_header_each():
    a = '# HELP m_total things\n# TYPE m_total counter\nm_total{q="x"} 1.0\n'
    b = (
        '# HELP m_total things\n# TYPE m_total counter\nm_total{q="y"} 2.0\nm_total{q="x"} 5.0\n'
        "# HELP n other\n# TYPE n gauge\nn 4.0\n"
    )
    text = sum_expositions([a, b])
    assert text == (
        '# HELP m_total things\n# TYPE m_total counter\nm_total{q="x"} 6.0\nm_total{q="y"} 2.0\n'
        "# HELP n other\n# TYPE n gauge\nn 4.0\n"
    )
    assert sum_expositions([a]) == a
    assert sum_expositions([]) == ""


def test_label_values_with_spaces_and_unparsable_lines():
    a = '# TYPE r counter\nr_total{route="GET /a b"} 1.0\nbroken line here\n'
    b = '# TYPE r counter\nr_total{route="GET /a b"} 2.0\n'
    assert sum_expositions([a, b]) == '# TYPE r counter\nr_total{route="GET /a b"} 3.0\n'


def test_sum_traffic():
    a = {
        "messages_total": 3, "bytes_total": 30, "messages_per_s": 0.3, "bytes_per_s": 3.0,
        "since_ms": 200, "scope": "gateway", "by_virtual_partition": [1, 2],
    }  # fmt: skip
    b = {
        "messages_total": 4, "bytes_total": 40, "messages_per_s": 0.4, "bytes_per_s": 4.0,
        "since_ms": 100, "scope": "gateway", "by_virtual_partition": [0, 1, 3],
    }  # fmt: skip
    total = sum_traffic([a, b])
    assert total["messages_total"] == 7 and total["bytes_total"] == 70
    assert total["messages_per_s"] == pytest.approx(0.7) and total["bytes_per_s"] == pytest.approx(7.0)
    assert total["since_ms"] == 100 and total["scope"] == "gateway"
    assert total["by_virtual_partition"] == [1, 3, 3]
    assert sum_traffic([a]) == a
    with pytest.raises(ValueError):
        sum_traffic([])
