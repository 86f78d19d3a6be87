"""Prometheus metrics of one read node, served as ``GET /internal/v1/metrics``.

Every ``ReadNodeMetrics`` has its own ``CollectorRegistry``. The gateway merges the
text of every node into its ``/metrics`` and adds the ``node`` label there.

Counters (counted by the hosted groups as things happen; a group that moves to
another node goes on counting there):

- ``vpq_delivered_messages_total{queue,group}``: messages handed to consumers by polls
  (redeliveries included), ``vpq_redelivered_messages_total{queue,group}``: those of
  them with ``delivery_count > 1``;
- ``vpq_acked_messages_total{queue,group}``, ``vpq_nacked_messages_total{queue,group}``;
- ``vpq_dead_lettered_messages_total{queue,group}``: produced durably to the group's DLQ.

Gauges, computed when scraped from every hosted group (its public group answer and
delivery stats):

- ``vpq_group_lag_messages{queue,group}``: messages not yet acked nor dead-lettered
  (waiting, ready, in flight, delayed, and tailed but not yet ingested), and the same
  split three ways: ``vpq_group_lane_lag_messages{queue,group,lane}``,
  ``vpq_group_env_lag_messages{queue,group,env}``, ``vpq_group_set_lag_messages{queue,group,set}``
  (each of the three sums to the total; the delivery state counts lanes, envs and sets
  separately, so there is no joint lane x env x set series);
- ``vpq_group_in_flight_messages``, ``vpq_group_ready_messages``, ``vpq_group_consumers``,
  ``vpq_group_pending_dead_letters`` (all ``{queue,group}``), ``vpq_read_node_groups``;
- ``vpq_group_oldest_unacked_age_seconds{queue,group,env,set,lane}``: age of the oldest
  message of each message context not yet acked nor dead-lettered;
- ``vpq_group_blocked_keys{queue,group}``: keys with a run in flight and more of their
  messages held behind it; ``vpq_group_parked_keys{queue,group}``: keys whose later
  messages wait in the log (no label per key);
- ``vpq_group_delayed_messages{queue,group}``: messages whose ``delay_ms`` /
  ``deliver_at_ms`` holds them in the timer index (not in the lag until they come due);
- per tailed partition: ``vpq_tailer_records_total{partition}``,
  ``vpq_tailer_records_indexed_only_total{partition}`` (tailed past the read-ahead bound:
  indexed, not decoded nor cached), ``vpq_tailer_errors_total{partition}``
  (counters of the tailer, which lives as long as the node), ``vpq_tailer_end_offset{partition}``,
  ``vpq_tailer_index_entries{partition}``, ``vpq_tailer_readers{partition}``;
- record cache: ``vpq_record_cache_entries``, ``vpq_record_cache_bytes``,
  ``vpq_record_cache_hit_ratio``, ``vpq_record_cache_fetches_total``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from vpq.common.errors import VpqError
from vpq.metadata.errors import MetadataUnavailable

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The classic Prometheus text format, what ``generate_latest`` writes."""


class DeliveryCounters(Protocol):
    """What a hosted group counts (``ReadNodeMetrics`` implements it)."""

    def delivered(self, queue: str, group: str, n: int, redelivered: int) -> None:
        """``n`` messages delivered, ``redelivered`` of them not for the first time."""

    def acked(self, queue: str, group: str, n: int) -> None: ...

    def nacked(self, queue: str, group: str, n: int) -> None: ...

    def dead_lettered(self, queue: str, group: str, n: int) -> None: ...

    def expired(self, queue: str, group: str, n: int) -> None: ...


class HostedGroup(Protocol):
    """What a scrape reads from a hosted group (``read_nodes.group_host.GroupHost``)."""

    queue: str
    group: str

    async def info(self) -> dict[str, Any]: ...

    async def oldest_unacked_by_context(self) -> Mapping[Any, int]: ...

    def stats(self) -> dict[str, int]: ...


@dataclass(frozen=True, slots=True)
class GroupSample:
    """One hosted group at scrape time."""

    queue: str
    group: str
    lag: int
    by_lane: Mapping[str, int]
    by_env: Mapping[str, int]
    by_set: Mapping[str, int]
    consumers: int
    in_flight: int
    ready: int
    pending_dead_letters: int
    blocked_keys: int = 0
    parked_keys: int = 0
    delayed: int = 0
    oldest_age_s: Mapping[tuple[str, str, str], float] = field(default_factory=dict)
    """(env, set, lane) -> age in seconds of the oldest unacked message"""


@dataclass(slots=True)
class NodeSample:
    """Everything the scrape-time gauges show (``collect`` builds it)."""

    groups: list[GroupSample] = field(default_factory=list)
    tailers: list[Mapping[str, Any]] = field(default_factory=list)
    cache: Mapping[str, Any] = field(default_factory=dict)


def group_sample(
    queue: str, group: str, info: Mapping[str, Any], stats: Mapping[str, int],
    oldest: Mapping[Any, int] | None = None, now_ms: int = 0,
) -> GroupSample:
    """A ``GroupSample`` from a group's public answer (``GroupHost.info()``), its
    delivery stats (``GroupHost.stats()``) and the oldest unacked timestamp per message
    context (``IsolationContext`` keys) at ``now_ms``. No I/O."""
    lag = info.get("lag") or {}
    members = info.get("members") or []
    return GroupSample(
        queue=queue,
        group=group,
        lag=int(lag.get("total", 0)),
        by_lane=dict(lag.get("by_lane", {})),
        by_env=dict(lag.get("by_env", {})),
        by_set=dict(lag.get("by_set", {})),
        consumers=len(members),
        in_flight=sum(int(m.get("in_flight", 0)) for m in members),
        ready=int(stats.get("ready", 0)),
        pending_dead_letters=int(stats.get("dead_letters", 0)),
        blocked_keys=int(stats.get("blocked_keys", 0)),
        parked_keys=int(stats.get("parked_keys", 0)),
        delayed=int(stats.get("delayed", 0)),
        oldest_age_s={
            (ctx.env, ctx.set, ctx.lane): max(0, now_ms - ts) / 1000.0 for ctx, ts in (oldest or {}).items()
        },
    )


async def collect(hosts: Iterable[HostedGroup], status: Mapping[str, Any]) -> NodeSample:
    """Sample every hosted group (one that closes meanwhile, or whose lag cannot be
    resolved because Redis is away, is left out) and take the
    tailers and cache from ``ReadNodeService.status()``."""
    sample = NodeSample(tailers=list(status.get("tailers", ())), cache=dict(status.get("cache") or {}))
    for host in hosts:
        try:
            info = await host.info()
            oldest = await host.oldest_unacked_by_context()
        except (VpqError, MetadataUnavailable, OSError):
            continue  # closed (moving) since the list was taken, or Redis away for a moment
        now = time.time_ns() // 1_000_000
        sample.groups.append(group_sample(host.queue, host.group, info, host.stats(), oldest, now))
    return sample


def _gauge(name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


class _SampleCollector:
    """Yields the scrape-time families of the sample ``render`` set."""

    def __init__(self) -> None:
        self.sample = NodeSample()

    def collect(self) -> Iterator[Metric]:
        s = self.sample
        qg = ("queue", "group")
        lag = _gauge("vpq_group_lag_messages", "Messages of the group not yet acked nor dead-lettered.", qg)
        by = {
            "lane": _gauge("vpq_group_lane_lag_messages", "Group lag by the lane of the messages.", (*qg, "lane")),
            "env": _gauge("vpq_group_env_lag_messages", "Group lag by the env of the messages.", (*qg, "env")),
            "set": _gauge("vpq_group_set_lag_messages", "Group lag by the set of the messages.", (*qg, "set")),
        }
        in_flight = _gauge("vpq_group_in_flight_messages", "Messages delivered and not yet acked.", qg)
        ready = _gauge("vpq_group_ready_messages", "Messages ready for delivery now.", qg)
        consumers = _gauge("vpq_group_consumers", "Live consumers of the group.", qg)
        dead = _gauge("vpq_group_pending_dead_letters", "Dead letters not yet produced to the DLQ.", qg)
        blocked = _gauge("vpq_group_blocked_keys", "Keys with a run in flight and more messages held behind it.", qg)
        parked = _gauge("vpq_group_parked_keys", "Keys whose later messages wait in the log.", qg)
        delayed = _gauge("vpq_group_delayed_messages", "Delayed messages waiting for their due time.", qg)
        age = _gauge(
            "vpq_group_oldest_unacked_age_seconds", "Age of the oldest message not yet acked, by message context.",
            (*qg, "env", "set", "lane"),
        )
        for g in s.groups:
            key = [g.queue, g.group]
            lag.add_metric(key, g.lag)
            for dim, values in (("lane", g.by_lane), ("env", g.by_env), ("set", g.by_set)):
                for value, n in sorted(values.items()):
                    by[dim].add_metric([*key, value], n)
            in_flight.add_metric(key, g.in_flight)
            ready.add_metric(key, g.ready)
            consumers.add_metric(key, g.consumers)
            dead.add_metric(key, g.pending_dead_letters)
            blocked.add_metric(key, g.blocked_keys)
            parked.add_metric(key, g.parked_keys)
            delayed.add_metric(key, g.delayed)
            for (env, set_, lane), seconds in sorted(g.oldest_age_s.items()):
                age.add_metric([*key, env, set_, lane], seconds)
        yield from (lag, *by.values(), in_flight, ready, consumers, dead, blocked, parked, delayed, age)
        yield GaugeMetricFamily("vpq_read_node_groups", "Groups this node hosts.", value=len(s.groups))
        yield from self._tailers(s.tailers)
        yield from self._cache(s.cache)

    @staticmethod
    def _tailers(tailers: Sequence[Mapping[str, Any]]) -> Iterator[Metric]:
        pp = ["partition"]
        records = CounterMetricFamily("vpq_tailer_records", "Records tailed from the partition.", labels=pp)
        indexed_only = CounterMetricFamily(
            "vpq_tailer_records_indexed_only",
            "Records tailed past the read-ahead bound: indexed, not decoded nor cached (read back when wanted).",
            labels=pp,
        )
        errors = CounterMetricFamily("vpq_tailer_errors", "Failed tail reads of the partition.", labels=pp)
        end = _gauge("vpq_tailer_end_offset", "Durable end offset of the partition as last seen by the tailer.", pp)
        entries = _gauge("vpq_tailer_index_entries", "Entries in the partition's queue index.", pp)
        readers = _gauge("vpq_tailer_readers", "Groups reading the partition through this tailer.", pp)
        for t in tailers:
            p = [str(t["pp"])]
            records.add_metric(p, float(t.get("records_tailed", 0)))
            indexed_only.add_metric(p, float(t.get("records_indexed_only", 0)))
            errors.add_metric(p, float(t.get("errors", 0)))
            end.add_metric(p, float(t.get("known_end", 0)))
            entries.add_metric(p, float(t.get("index_entries", 0)))
            readers.add_metric(p, float(t.get("readers", 0)))
        yield from (records, indexed_only, errors, end, entries, readers)

    @staticmethod
    def _cache(cache: Mapping[str, Any]) -> Iterator[Metric]:
        if not cache:
            return
        c = cache.get
        yield GaugeMetricFamily("vpq_record_cache_entries", "Records in the decoded-record cache.", value=c("entries", 0))
        yield GaugeMetricFamily("vpq_record_cache_bytes", "Bytes held by the decoded-record cache.", value=c("bytes", 0))
        yield GaugeMetricFamily("vpq_record_cache_hit_ratio", "Hit ratio of the record cache.", value=c("hit_ratio", 0.0))
        yield CounterMetricFamily("vpq_record_cache_fetches", "Reads refilling the record cache.", value=c("fetches", 0))


class ReadNodeMetrics:
    """The read node's series (see the module docstring). Implements ``DeliveryCounters``."""

    content_type = CONTENT_TYPE

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        qg = ["queue", "group"]
        self._delivered = Counter("vpq_delivered_messages", "Messages delivered to consumers.", qg, registry=r)
        self._redelivered = Counter(
            "vpq_redelivered_messages", "Deliveries of messages delivered before (delivery_count > 1).", qg, registry=r
        )
        self._acked = Counter("vpq_acked_messages", "Messages acknowledged.", qg, registry=r)
        self._nacked = Counter("vpq_nacked_messages", "Messages given back by a nack.", qg, registry=r)
        self._dead = Counter("vpq_dead_lettered_messages", "Messages produced to the group's DLQ.", qg, registry=r)
        self._expired = Counter(
            "vpq_expired_messages", "Messages the group never got: past the queue's retention_ms.", qg, registry=r
        )
        self._sample = _SampleCollector()
        r.register(self._sample)  # type: ignore[arg-type]

    # -------------------------------------------------------- DeliveryCounters
    def delivered(self, queue: str, group: str, n: int, redelivered: int) -> None:
        if not n:
            return
        self._delivered.labels(queue, group).inc(n)
        if redelivered:
            self._redelivered.labels(queue, group).inc(redelivered)

    def acked(self, queue: str, group: str, n: int) -> None:
        if n:
            self._acked.labels(queue, group).inc(n)

    def nacked(self, queue: str, group: str, n: int) -> None:
        if n:
            self._nacked.labels(queue, group).inc(n)

    def dead_lettered(self, queue: str, group: str, n: int) -> None:
        if n:
            self._dead.labels(queue, group).inc(n)

    def expired(self, queue: str, group: str, n: int) -> None:
        if n:
            self._expired.labels(queue, group).inc(n)

    # ---------------------------------------------------------------- scraping
    def render(self, sample: NodeSample) -> bytes:
        """The Prometheus text of the counters and of ``sample``'s gauges."""
        self._sample.sample = sample
        try:
            return generate_latest(self.registry)
        finally:
            self._sample.sample = NodeSample()

    async def scrape(self, hosts: Iterable[HostedGroup], status: Mapping[str, Any]) -> bytes:
        """``render(await collect(hosts, status))``."""
        return self.render(await collect(hosts, status))


class NoCounters:
    """``DeliveryCounters`` that count nothing (a group host built without metrics)."""

    def delivered(self, queue: str, group: str, n: int, redelivered: int) -> None:
        return None

    def acked(self, queue: str, group: str, n: int) -> None:
        return None

    def nacked(self, queue: str, group: str, n: int) -> None:
        return None

    def dead_lettered(self, queue: str, group: str, n: int) -> None:
        return None

    def expired(self, queue: str, group: str, n: int) -> None:
        return None
