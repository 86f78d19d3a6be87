"""``CounterTable``: a Prometheus counter family whose label sets live in a plain dict.

A labelled ``prometheus_client.Counter`` builds a child object (with its own lock) for
every new label set: about 6 us each, and the per-queue series of a platform with
thousands of queues have tens of thousands of them, most created the first time a queue
gets traffic. With 1,000 fresh queues per second spread over 8 partitions that was a
tenth of a write node's time. A ``CounterTable`` keeps ``label values -> total`` in a
dict (one dict update per increment, owned by one thread: the event loop's) and builds
the family only when scraped. Same exposition as a labelled ``Counter`` (``<name>_total``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily


class CounterTable:
    """Register it in a ``CollectorRegistry``; not thread-safe (one thread increments)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str]) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._values: dict[tuple[str, ...], float] = {}

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        """Add ``amount`` (>= 0) to the series of ``labels`` (one value per label name)."""
        values = self._values
        values[labels] = values.get(labels, 0.0) + amount

    def value(self, labels: tuple[str, ...]) -> float:
        return self._values.get(labels, 0.0)

    def __len__(self) -> int:
        return len(self._values)

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for labels, total in list(self._values.items()):
            family.add_metric(labels, total)
        yield family
