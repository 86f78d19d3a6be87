"""Prometheus metrics of one write node, served as ``GET /internal/v1/metrics``.

Every ``WriteNodeMetrics`` has its own ``CollectorRegistry`` (several nodes in one
process, as in tests, never share series). The gateway merges the text of every
node into its ``/metrics`` and adds the ``node`` label there, so no series here
carries it. Label ``partition`` is the physical partition id.

Counters (counted by the append handler once an append is durable):

- ``vpq_produced_messages_total{queue,partition}``, ``vpq_produced_bytes_total{queue,partition}``:
  messages and value bytes of each queue appended durably (produce rates);
- ``vpq_partition_appended_records_total{partition}``, ``vpq_partition_appended_bytes_total{partition}``
  (whole batch bytes, as written to the log), ``vpq_partition_appended_batches_total{partition}``.

Histograms:

- ``vpq_append_seconds{partition}``: from handing a batch to the log to its being durable
  (group-commit wait, write and fsync);
- ``vpq_fsync_seconds{partition}``: each ``fdatasync``/``fsync`` of the partition's files,
  or write made durable in the same call (``Storage.write_all_dsync``), timed on the
  log's I/O thread;
- ``vpq_group_commit_records{partition}``: records made durable by one group commit.

Gauges, read when scraped: ``vpq_partition_{start,end,next}_offset``, ``vpq_partition_size_bytes``,
``vpq_partition_online`` (1/0), ``vpq_partition_dedup_ids`` (ids in the dedup index),
``vpq_partition_dedup_duplicates`` (messages answered as duplicates since the partition
opened), ``vpq_partition_group_commits`` and ``vpq_partition_loop_commits`` (group commits
since the partition opened, and those of them written on the event loop) per held
partition (``end`` is the durable end), and
``vpq_write_node_map_epoch``, ``vpq_write_node_partitions``.

The fsync and group-commit series need logs built by :meth:`WriteNodeMetrics.log_factory`
(the service's default); a caller that injects its own log factory gets the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from vpq.common.counter_table import CounterTable
from vpq.config.settings import LogSettings
from vpq.write_nodes.group_commit import FsyncFn, WriteFn, default_fsync
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.storage import OS_STORAGE, Storage

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The classic Prometheus text format, what ``generate_latest`` writes."""

APPEND_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
FSYNC_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
GROUP_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)

Summary = Mapping[tuple[int, int, int], Sequence[int]]
"""(queue id, vp, context id) -> [messages, value bytes], as ``codec.columnar.summarize`` returns."""


def per_queue(summary: Summary, queues: Mapping[int, tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """queue name -> (messages, value bytes) of one appended batch. ``queues`` maps a queue
    id to (name, V) (``PlacementGuard.check``); ids missing there are left out. No I/O."""
    out: dict[str, tuple[int, int]] = {}
    for (qid, _vp, _ctx), counts in summary.items():
        named = queues.get(qid)
        if named is None:
            continue
        n, nbytes = out.get(named[0], (0, 0))
        out[named[0]] = (n + counts[0], nbytes + counts[1])
    return out


def _gauge(name: str, doc: str) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=["partition"])


class _PartitionGauges:
    """The scrape-time gauges: built from the rows ``render`` was given."""

    def __init__(self) -> None:
        self.rows: Sequence[Mapping[str, Any]] = ()
        self.map_epoch = 0
        self.replication: Mapping[str, int] = {}

    def collect(self) -> Iterator[Metric]:
        fams = {
            "start_offset": _gauge("vpq_partition_start_offset", "First offset still in the log (after retention)."),
            "end_offset": _gauge("vpq_partition_end_offset", "Durable end: the next offset to become durable."),
            "next_offset": _gauge("vpq_partition_next_offset", "Next offset to assign (appends in flight included)."),
            "bytes": _gauge("vpq_partition_size_bytes", "Bytes of the log's segments."),
            "compacted_bytes": _gauge(
                "vpq_partition_compacted_bytes", "Bytes compaction gave back (deleted and expired queues) since open."
            ),
            "dedup_ids": _gauge("vpq_partition_dedup_ids", "Dedup ids in the partition's index."),
            "dedup_duplicates": _gauge(
                "vpq_partition_dedup_duplicates", "Messages not stored again as duplicates, since the partition opened."
            ),
            "group_commits": _gauge("vpq_partition_group_commits", "Group commits since the partition opened."),
            "loop_commits": _gauge(
                "vpq_partition_loop_commits",
                "Of the group commits, those an idle node wrote on its event loop (log.inline_commit_idle_ms).",
            ),
        }
        online = _gauge("vpq_partition_online", "1 while the partition serves appends and reads.")
        for row in self.rows:
            pp = str(row["id"])
            for key, fam in fams.items():
                fam.add_metric([pp], float(row.get(key, 0)))
            online.add_metric([pp], 1.0 if row.get("online") else 0.0)
        yield from fams.values()
        yield online
        yield from self._replication_metrics()
        yield GaugeMetricFamily("vpq_write_node_partitions", "Partitions this node holds.", value=len(self.rows))
        yield GaugeMetricFamily("vpq_write_node_map_epoch", "Epoch of this node's placement map.", value=self.map_epoch)


    def _replication_metrics(self) -> Iterator[Metric]:
        """Per led partition (rows with a ``leader_epoch``): epoch, high watermark, size
        of the in-sync set and each follower's lag; the node's in-sync set changes."""
        epoch = _gauge("vpq_partition_leader_epoch", "Leader epoch of a partition this node leads.")
        hw = _gauge("vpq_partition_high_watermark", "Offsets below it are fsynced on every in-sync replica.")
        isr = _gauge("vpq_partition_in_sync_replicas", "Replicas in the in-sync set of a partition this node leads.")
        lag = GaugeMetricFamily(
            "vpq_replica_lag_records", "Records a follower lacks of the leader's durable log.", labels=["partition", "replica"]
        )
        for row in self.rows:
            if "leader_epoch" not in row:
                continue
            pp = str(row["id"])
            epoch.add_metric([pp], float(row["leader_epoch"]))
            hw.add_metric([pp], float(row.get("high_watermark", 0)))
            isr.add_metric([pp], float(len(row.get("in_sync_replicas", ()))))
            for replica, n in (row.get("replica_lag") or {}).items():
                lag.add_metric([pp, str(replica)], float(n))
        if not self.replication:
            return
        yield from (epoch, hw, isr, lag)
        for key, doc in (
            ("isr_shrinks", "Followers this node took out of an in-sync set."),
            ("isr_expands", "Followers this node added back to an in-sync set."),
            ("truncations", "Times a follower on this node truncated its log where it diverged from the leader."),
            ("unclean_elections", "Partitions this node leads by an operator's unclean election."),
            ("unclean_lost_offsets", "Offsets those unclean elections may have lost (last high watermark minus this copy's end)."),
        ):
            yield CounterMetricFamily(f"vpq_replication_{key}", doc, value=float(self.replication.get(key, 0)))


class WriteNodeMetrics:
    """The write node's series (see the module docstring); ``render`` gives the text."""

    content_type = CONTENT_TYPE

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        qp = ["queue", "partition"]
        # per (queue, partition): thousands of queues make tens of thousands of series, kept
        # in plain dicts (common.counter_table) rather than one Counter child each
        self.produced_messages = CounterTable("vpq_produced_messages", "Messages appended durably.", qp)
        self.produced_bytes = CounterTable("vpq_produced_bytes", "Value bytes appended durably.", qp)
        r.register(self.produced_messages)  # type: ignore[arg-type]
        r.register(self.produced_bytes)  # type: ignore[arg-type]
        self.appended_records = Counter(
            "vpq_partition_appended_records", "Records appended durably to the partition.", ["partition"], registry=r
        )
        self.appended_bytes = Counter(
            "vpq_partition_appended_bytes", "Record-batch bytes appended durably.", ["partition"], registry=r
        )
        self.appended_batches = Counter(
            "vpq_partition_appended_batches", "Record batches appended durably.", ["partition"], registry=r
        )
        self.append_seconds = Histogram(
            "vpq_append_seconds",
            "Time from handing a batch to the log to its being durable.",
            ["partition"],
            buckets=APPEND_BUCKETS,
            registry=r,
        )
        self.fsync_seconds = Histogram(
            "vpq_fsync_seconds",
            "Duration of each fsync of the partition's files.",
            ["partition"],
            buckets=FSYNC_BUCKETS,
            registry=r,
        )
        self.group_records = Histogram(
            "vpq_group_commit_records",
            "Records made durable by one group commit.",
            ["partition"],
            buckets=GROUP_BUCKETS,
            registry=r,
        )
        self._gauges = _PartitionGauges()
        r.register(self._gauges)  # type: ignore[arg-type]
        # label children by partition: ``labels()`` costs a lock and a tuple per call,
        # several calls per appended batch (the series are never removed)
        self._by_partition: dict[int, tuple[Any, Any, Any, Any]] = {}

    # ---------------------------------------------------------------- observing
    def appended(
        self,
        pp: int,
        batch_bytes: int,
        summary: Summary,
        queues: Mapping[int, tuple[str, int]],
        seconds: float,
    ) -> None:
        """One batch of ``pp`` is durable: ``summary`` and ``queues`` as the handler has them."""
        kids = self._by_partition.get(pp)
        if kids is None:
            p = str(pp)
            kids = self._by_partition[pp] = (
                self.appended_records.labels(p),
                self.appended_bytes.labels(p),
                self.appended_batches.labels(p),
                self.append_seconds.labels(p),
            )
        p = str(pp)
        messages, value_bytes = self.produced_messages.inc, self.produced_bytes.inc
        for name, (n, nbytes) in per_queue(summary, queues).items():
            messages((name, p), n)
            value_bytes((name, p), nbytes)
        kids[0].inc(sum(c[0] for c in summary.values()))
        kids[1].inc(batch_bytes)
        kids[2].inc()
        kids[3].observe(seconds)

    def timed_fsync(self, pp: int, inner: FsyncFn = default_fsync) -> FsyncFn:
        """``inner`` timed into ``vpq_fsync_seconds{partition=pp}`` (thread-safe: the log
        calls it on its I/O thread). A failing fsync is not observed."""
        hist = self.fsync_seconds.labels(str(pp))

        def fsync(fd: int) -> None:
            started = time.perf_counter()
            inner(fd)
            hist.observe(time.perf_counter() - started)

        return fsync

    def timed_write_sync(self, pp: int, inner: WriteFn) -> WriteFn:
        """``inner`` (a write made durable in the same call) timed into
        ``vpq_fsync_seconds{partition=pp}``, like :meth:`timed_fsync`."""
        hist = self.fsync_seconds.labels(str(pp))

        def write_sync(fd: int, buffers: list[bytes]) -> int:
            started = time.perf_counter()
            n = inner(fd, buffers)
            hist.observe(time.perf_counter() - started)
            return n

        return write_sync

    def group_observer(self, pp: int) -> Callable[[int], None]:
        """Observes the records of each group commit of ``pp`` (``PartitionLog(on_group=...)``)."""
        return self.group_records.labels(str(pp)).observe

    def log_factory(
        self, directory: Path, settings: LogSettings, pp: int, storage: Storage = OS_STORAGE
    ) -> PartitionLog:
        """A ``write_nodes.ownership.LogFactory`` whose logs feed the fsync and group-commit
        series; their files live in ``storage``."""
        return PartitionLog(
            directory,
            settings,
            pp,
            fsync=self.timed_fsync(pp, storage.fdatasync),
            write_sync=self.timed_write_sync(pp, storage.write_all_dsync),
            on_group=self.group_observer(pp),
            storage=storage,
        )

    # ---------------------------------------------------------------- scraping
    def render(
        self, partitions: Sequence[Mapping[str, Any]], map_epoch: int, replication: Mapping[str, int] | None = None
    ) -> bytes:
        """The Prometheus text of every series; ``partitions`` are the rows of
        ``PartitionOwnership.snapshot()`` (the partitions held now; with replication,
        with the leader fields of ``ReplicaManager.leader_row``), ``replication`` the
        manager's counters (``isr_shrinks``, ``isr_expands``, ``truncations``,
        ``unclean_elections``, ``unclean_lost_offsets``)."""
        self._gauges.rows = partitions
        self._gauges.map_epoch = map_epoch
        self._gauges.replication = replication or {}
        try:
            return generate_latest(self.registry)
        finally:
            self._gauges.rows = ()
