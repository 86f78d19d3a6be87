"""Prometheus metrics of the gateway, in a registry of its own (one per app, so several
gateways in one process or test never share counters).

Series (all prefixed ``vpq_gateway_``):

* ``requests_total{method,route,status}`` and ``request_seconds{method,route}``; ``route``
  is the path template (``/v1/queues/{queue}/messages``), ``unmatched`` for unknown paths,
  so label cardinality stays bounded;
* ``produced_messages_total{queue}``, ``produced_bytes_total{queue}`` (stored value bytes);
* ``delivered_messages_total{queue,group}``, ``acked_messages_total{queue,group}``,
  ``nacked_messages_total{queue,group}``;
* ``in_flight_requests`` (gauge).

Only successful operations count toward the per-queue series, so probes for unknown queues
cannot grow the label sets.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from vpq.common.counter_table import CounterTable

UNMATCHED_ROUTE = "unmatched"
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GatewayMetrics:
    """The gateway's counters; ``render()`` gives the ``/metrics`` text."""

    # the classic text format (what generate_latest writes), understood by every Prometheus
    content_type = "text/plain; version=0.0.4; charset=utf-8"

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "vpq_gateway_requests", "HTTP requests answered", ["method", "route", "status"], registry=r
        )
        self.latency = Histogram(
            "vpq_gateway_request_seconds",
            "time to answer an HTTP request",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge("vpq_gateway_in_flight_requests", "requests being answered", registry=r)
        # one series per queue: thousands of them, kept in plain dicts (common.counter_table)
        self.produced_messages = CounterTable("vpq_gateway_produced_messages", "messages durably produced", ["queue"])
        self.produced_bytes = CounterTable("vpq_gateway_produced_bytes", "value bytes durably produced", ["queue"])
        r.register(self.produced_messages)  # type: ignore[arg-type]
        r.register(self.produced_bytes)  # type: ignore[arg-type]
        self.delivered = Counter(
            "vpq_gateway_delivered_messages", "messages delivered to consumers", ["queue", "group"], registry=r
        )
        self.acked = Counter("vpq_gateway_acked_messages", "messages acknowledged", ["queue", "group"], registry=r)
        self.nacked = Counter("vpq_gateway_nacked_messages", "messages given back (nack)", ["queue", "group"], registry=r)
        # label children of the per-request series (``labels()`` takes a lock and builds a
        # tuple on every call; routes are templates, so these stay small)
        self._by_request: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        kids = self._by_request.get(key)
        if kids is None:
            kids = self._by_request[key] = (
                self.requests.labels(method, route, str(status)),
                self.latency.labels(method, route),
            )
        kids[0].inc()
        kids[1].observe(seconds)

    def produced(self, queue: str, messages: int, value_bytes: int) -> None:
        key = (queue,)
        self.produced_messages.inc(key, messages)
        self.produced_bytes.inc(key, value_bytes)

    def delivered_to(self, queue: str, group: str, messages: int) -> None:
        self.delivered.labels(queue, group).inc(messages)

    def acked_by(self, queue: str, group: str, messages: int) -> None:
        self.acked.labels(queue, group).inc(messages)

    def nacked_by(self, queue: str, group: str, messages: int) -> None:
        self.nacked.labels(queue, group).inc(messages)

    def render(self, extra: str = "") -> bytes:
        """Prometheus text of the gateway's registry followed by ``extra`` (node metrics)."""
        return self.render_extra(generate_latest(self.registry), extra)

    @staticmethod
    def render_extra(text: bytes, extra: str) -> bytes:
        """``text`` followed by ``extra`` (ending in a newline)."""
        if extra:
            text += extra.encode() if extra.endswith("\n") else (extra + "\n").encode()
        return text
