"""``WriteNodeService``: one write node (internal HTTP API over the partitions it owns).

``start()``:
1. connects to Redis (``MetadataStore``), reads the cluster's physical-partition
   count, storing ``settings.cluster.physical_partitions`` when the cluster is new
   (``MetadataStore.get_or_init_partition_count``);
2. starts the event listener and the map cache (the placement checks read memory);
3. starts the traffic exporter (per (queue, vp, lane, env) counts, one Parquet file
   per ``rebalance.window_ms`` window under the stats directory);
4. serves the internal API on ``host:port`` (0 = a free port);
5. registers the node (role ``write``, its address: ``advertise`` when given, else the
   bound ``host:port``; ``address`` tells; meta ``{"index"}``) and keeps the
   registration and its leases alive (``LeaseKeeper``, TTL ``redis.lease_ttl_ms``);
6. acquires and opens its home partitions (``PartitionOwnership``), then keeps
   taking over dead siblings' partitions and handing them back; with
   ``cluster.replication_factor`` >= 2 every node keeps its own copies under
   ``<data_dir>/write-node-<i>/`` instead, leads the partitions it wins the leader
   epoch of and follows the others it holds a replica of (``write_nodes.replication``),
   serving ``POST /internal/v1/replica/fetch`` to its followers; each partition's dedup
   index (``write_nodes.dedup``) is rebuilt from its log before it serves;
7. compacts its partitions every ``log.compaction_interval_ms`` (``Compactor``: records
   of deleted queues and records past their queue's ``retention_ms`` go).

``stop()`` (SIGTERM): refuses new requests (503 ``not_owner``), lets in-flight appends
finish, closes every log (flush, fsync, checkpoint), releases the leases, deregisters,
writes the last (partial) traffic window and closes the server and the Redis client.
``stop(release=False)`` skips releasing and deregistering: Redis sees a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlparse

from aiohttp import web

from vpq.codec.columnar import TrafficKey
from vpq.common.burst_accept import listen_sockets
from vpq.common.http_lane import LaneSite
from vpq.config.settings import LogSettings, Settings
from vpq.metadata.aio import cancel_and_wait
from vpq.metadata.contexts import ContextRegistry
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.events import EventListener
from vpq.metadata.lease_keeper import LeaseKeeper
from vpq.metadata.map_cache import MapCache
from vpq.metadata.queue_config import MAX_DEDUP_WINDOW_MS
from vpq.metadata.store import MetadataStore
from vpq.traffic.stats_writer import StatsWriter
from vpq.traffic.traffic_counter import TrafficCounter
from vpq.write_nodes.append_lane import AppendLane
from vpq.write_nodes.compactor import Compactor
from vpq.write_nodes.dedup import DedupIndex
from vpq.write_nodes.dedup_log import rebuild
from vpq.write_nodes.disk_guard import DiskGuard
from vpq.write_nodes.fence import FenceView, wire_fence
from vpq.write_nodes.handlers import PlacementGuard, WriteNodeHandlers, build_app
from vpq.write_nodes.log import PartitionLog
from vpq.write_nodes.metrics import WriteNodeMetrics
from vpq.write_nodes.ownership import WRITE_ROLE, LogFactory, OwnedPartition, PartitionOwnership
from vpq.write_nodes.replica_follower import FETCH_PATH
from vpq.write_nodes.replica_handlers import ReplicaFetchHandler
from vpq.write_nodes.replication import ReplicaManager
from vpq.write_nodes.storage import OS_STORAGE, Storage

log = logging.getLogger(__name__)

STATS_SUBDIR = "stats"
PARTITIONS_SUBDIR = "partitions"


def replica_partitions_dir(data_dir: Path, node_index: int) -> Path:
    """Where write node ``node_index`` keeps its replicas when partitions are
    replicated: ``<data_dir>/write-node-<i>/partitions`` (no directory is shared)."""
    return data_dir / f"write-node-{node_index}" / PARTITIONS_SUBDIR
MIN_BODY_LIMIT = 64 << 20
DEDUP_SKEW_MS = 10_000  # extra log scanned at open for clocks of gateways and nodes that differ
REBUILD_RECORDS_PER_ID = 2  # the rebuild reads at most this many records per id the index may hold



def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def stats_dir(settings: Settings) -> Path:
    """Where this node writes traffic statistics: ``rebalance.stats_uri`` when it is a
    local path (or ``file:`` URI), else ``<data_dir>/stats``. A node writes only to a
    file system it has mounted: on a cluster, ``stats_uri`` is the path of a shared
    mount (NFS...) every write node and Spark host sees at the same path; a non-local
    URI (hdfs://, s3a://) is read by the Spark job only, so the node warns and writes
    under its data directory, where the job does not look."""
    uri = settings.rebalance.stats_uri
    if uri:
        parsed = urlparse(uri)
        if parsed.scheme == "":
            return Path(uri)
        if parsed.scheme == "file":
            return Path(parsed.path)
        log.warning(
            "stats_uri %s is not a local path: write nodes cannot write there, writing statistics under %s "
            "(mount the shared location and set rebalance.stats_uri to its path; docs/spark-cluster.md)",
            uri, settings.data_dir / STATS_SUBDIR,
        )
    return settings.data_dir / STATS_SUBDIR


def _queue_aware(factory: LogFactory) -> LogFactory:
    """Logs whose retention waits for the queue policy (the compactor gives it)."""

    def build(directory: Path, settings: LogSettings, pp: int) -> PartitionLog:
        plog = factory(directory, settings, pp)
        plog.retention_waits_for_policy = True
        return plog

    return build


class TrafficExporter:
    """Counts appended traffic (``count_batch``: no I/O) and writes every finished window
    through a ``StatsWriter`` (``flush``, called every second by the background task).
    Context ids are resolved to (env, lane) in ``flush``, off the append path; an id
    Redis does not know is counted as the default context (``prod``, backbone)."""

    def __init__(self, directory: Path, node_id: str, window_ms: int, contexts: ContextRegistry) -> None:
        self._writer = StatsWriter(directory, node_id)
        self._window_ms = window_ms
        self._contexts = contexts
        self._counter = TrafficCounter(window_ms, wall_ms())
        self._names: dict[int, tuple[str, str]] = {}
        self._pending: list[tuple[int, str, int, int, int, int, int]] = []
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._writer.start, wall_ms())
        self._counter = TrafficCounter(self._window_ms, wall_ms())
        self._task = asyncio.create_task(self._run(), name="write-node-traffic")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        try:
            await self.flush(final=True)
        except (OSError, MetadataUnavailable) as exc:
            log.warning("could not write the last traffic window: %s", exc)
        self._writer.stop()

    def count_batch(self, summary: Mapping[TrafficKey, Sequence[int]], queues: Mapping[int, tuple[str, int]]) -> None:
        """``count`` for every (queue id, vp, context id) of one appended batch's summary
        (``queues``: id -> (name, V), as ``PlacementGuard.check`` answers; ids missing there
        are left out), with one clock read and one window lookup for the whole batch."""
        now = wall_ms()
        names_of = self._names
        rows: list[tuple[str, int, int, str, str, int, int]] = []
        for (qid, vp, ctx), counts in summary.items():
            named = queues.get(qid)
            if named is None:
                continue
            names = names_of.get(ctx)
            if names is None:
                self._pending.append((now, named[0], vp, named[1], ctx, counts[0], counts[1]))
            else:
                rows.append((named[0], vp, named[1], names[1], names[0], counts[0], counts[1]))
        for why in self._counter.record_many(now, rows):
            log.warning("traffic not counted: %s", why)

    def _record(self, t: int, queue: str, vp: int, v: int, names: tuple[str, str], n: int, nbytes: int) -> None:
        try:
            self._counter.record(t, queue, vp, v, n, nbytes, lane=names[1], env=names[0])
        except ValueError as exc:
            log.warning("traffic not counted: %s", exc)

    async def flush(self, final: bool = False) -> list[Path]:
        """Resolve pending contexts, write every ended window (with ``final``, the
        current one too); returns the files written."""
        async with self._lock:
            await self._resolve_pending(final)
            now = wall_ms()
            if final:
                now = now - now % self._window_ms + self._window_ms
            windows = self._counter.drain(now)
            loop = asyncio.get_running_loop()
            written: list[Path] = []
            for start, rows in windows:
                written.append(await loop.run_in_executor(None, self._writer.write_window, start, self._window_ms, rows))
            if windows:
                await loop.run_in_executor(None, self._writer.prune, wall_ms())
            return written

    async def _resolve_pending(self, final: bool) -> None:
        pending, self._pending = self._pending, []
        for item in pending:
            ctx = item[4]
            names = self._names.get(ctx)
            if names is None:
                try:
                    env, _set, lane = await self._contexts.resolve(ctx)
                    names = (env, lane)
                except KeyError:
                    names = ("prod", "")
                except (MetadataUnavailable, OSError):
                    if not final:
                        self._pending.append(item)
                        continue
                    names = ("prod", "")
                self._names[ctx] = names
            self._record(item[0], item[1], item[2], item[3], names, item[5], item[6])

    async def _run(self) -> None:
        interval = min(self._window_ms, 1000) / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("writing traffic statistics failed")


class WriteNodeService:
    def __init__(
        self,
        settings: Settings,
        node_id: str,
        node_index: int,
        redis_url: str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        log_factory: LogFactory | None = None,
        storage: Storage = OS_STORAGE,
        use_pubsub: bool = True,
        takeover: bool = True,
        reopen_backoff_s: float = 1.0,
        cluster_secret: str | None = None,
        advertise: str | None = None,
    ) -> None:
        """``log_factory`` builds partition logs (tests inject failing I/O; the default,
        ``WriteNodeMetrics.log_factory``, feeds the fsync and group-commit metrics);
        ``storage`` is the file system of the default factory's logs (a test injects a
        simulated disk);
        ``use_pubsub=False`` makes the map cache rely on polling and on-demand reloads;
        ``takeover=False`` never takes a dead sibling's partitions (required whenever the
        write nodes do not share one data directory: a sibling's log is not here); an
        offline partition is reopened after ``reopen_backoff_s`` (doubling on each failure);
        ``advertise`` (``host:port``) is the address registered for other nodes to reach
        this one (default: the bound ``host:port``);
        ``cluster_secret`` (``common.cluster_secret``): every call to this node's internal
        API must carry it, and this node's calls to other nodes carry it."""
        if not 0 <= node_index < settings.cluster.write_nodes:
            raise ValueError(f"node index {node_index} outside [0, {settings.cluster.write_nodes})")
        self.settings = settings
        self.node_id = node_id
        self.node_index = node_index
        self._redis_url = redis_url
        self._host = host
        self._port = port
        self._advertise = advertise
        self.metrics = WriteNodeMetrics()
        self._log_factory = _queue_aware(log_factory or functools.partial(self.metrics.log_factory, storage=storage))
        self._use_pubsub = use_pubsub
        self._takeover = takeover
        self._reopen_backoff_s = reopen_backoff_s
        self._cluster_secret = cluster_secret
        self._md: MetadataStore | None = None
        self._listener: EventListener | None = None
        self._cache: MapCache | None = None
        self._fence: FenceView | None = None
        self._traffic: TrafficExporter | None = None
        self._runner: web.AppRunner | None = None
        self._keeper: LeaseKeeper | None = None
        self._ownership: PartitionOwnership | None = None
        self._replication: ReplicaManager | None = None
        self._compactor: Compactor | None = None
        self._socks: list[socket.socket] = []
        self.partition_count = 0
        self.address = ""

    @property
    def ownership(self) -> PartitionOwnership:
        if self._ownership is None:
            raise RuntimeError("service not started")
        return self._ownership

    @property
    def traffic(self) -> TrafficExporter:
        if self._traffic is None:
            raise RuntimeError("service not started")
        return self._traffic

    async def start(self) -> None:
        if self._md is not None:
            raise RuntimeError("service already started")
        s = self.settings
        try:
            md = self._md = MetadataStore(s.redis, url=self._redis_url, queue_defaults=s.queues)
            await md.start()
            self.partition_count = await md.get_or_init_partition_count(s.cluster.physical_partitions)
            if self.partition_count != s.cluster.physical_partitions:
                log.warning(
                    "the cluster has %d physical partitions (settings ask for %d): keeping %d",
                    self.partition_count,
                    s.cluster.physical_partitions,
                    self.partition_count,
                )
            self._listener = md.event_listener(use_pubsub=self._use_pubsub)
            await self._listener.start()
            self._cache = MapCache(md.queues, md.maps, self._listener, capacity=s.redis.map_cache_queues)
            await self._cache.start()
            self._fence = FenceView(md.fences, self._listener)
            await self._fence.start()
            self._traffic = TrafficExporter(stats_dir(s).resolve(), self.node_id, s.rebalance.window_ms, md.contexts)
            await self._traffic.start()
            ttl = s.redis.lease_ttl_ms
            socks = self._socks = listen_sockets(self._host, self._port)
            self.address = self._advertise or f"{self._host}:{socks[0].getsockname()[1]}"
            self._keeper = LeaseKeeper(
                md.leases,
                self.node_id,
                ttl,
                on_lost=self._on_lost,
                nodes=md.nodes,
                role=WRITE_ROLE,
                address=self.address,
                meta={"index": self.node_index, "pid": os.getpid()},
            )
            partitions_dir = s.data_dir.resolve() / PARTITIONS_SUBDIR
            if s.cluster.replication_factor >= 2:  # each replica has its own copy
                partitions_dir = replica_partitions_dir(s.data_dir.resolve(), self.node_index)
                self._replication = ReplicaManager(
                    node_id=self.node_id,
                    node_index=self.node_index,
                    cluster=s.cluster,
                    partition_count=self.partition_count,
                    partitions_dir=partitions_dir,
                    log_settings=s.log,
                    log_factory=self._log_factory,
                    leaders=md.leaders,
                    nodes=md.nodes,
                    cluster_secret=self._cluster_secret,
                )
            self._ownership = PartitionOwnership(
                node_id=self.node_id,
                node_index=self.node_index,
                write_nodes=s.cluster.write_nodes,
                partition_count=self.partition_count,
                partitions_dir=partitions_dir,
                replication=self._replication,
                log_settings=s.log,
                keeper=self._keeper,
                leases=md.leases,
                nodes=md.nodes,
                ttl_ms=ttl,
                log_factory=self._log_factory,
                takeover=self._takeover,
                reopen_backoff_s=self._reopen_backoff_s,
                on_open=self._prepare_partition,
            )
            guard = PlacementGuard(self._cache)
            handlers = WriteNodeHandlers(
                self.node_id, self._ownership, guard, self._traffic, self.metrics, fence=self._fence,
                data_dir=s.data_dir, disk=DiskGuard(s.data_dir, s.log.min_free_bytes),
                replication=self._replication,
            )
            body_limit = max(MIN_BODY_LIMIT, 2 * s.gateway.max_request_bytes)
            app = build_app(handlers, client_max_size=body_limit, cluster_secret=self._cluster_secret)
            if self._replication is not None:
                fetcher = ReplicaFetchHandler(self._ownership, self._replication)
                app.router.add_post(FETCH_PATH, fetcher.fetch)
                self._replication.on_fenced = self._ownership.give_up
            wire_fence(app, self._fence, self._ownership, lambda epoch: guard.refresh_if_needed(epoch, ()))
            self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
            await self._runner.setup()
            lane = AppendLane(handlers, max_body_bytes=body_limit, cluster_secret=self._cluster_secret)
            await LaneSite(self._runner, lane, socks=socks).start()
            await self._keeper.start()
            await self._ownership.start()
            if self._replication is not None:
                await self._replication.start()
            self._compactor = Compactor(md.queues, self._ownership, s.log.compaction_interval_ms / 1000.0)
            self._compactor.start()
        except BaseException:
            await self._teardown(release=True)
            raise
        held = [p.pp for p in self._ownership.held()]
        log.info(
            "write node %s (index %d) serving on %s; partitions %s of %d",
            self.node_id, self.node_index, self.address, held, self.partition_count,
        )

    async def _prepare_partition(self, part: OwnedPartition) -> None:
        """Rebuild the partition's dedup index from its log: the records of the longest
        window a queue may have (``MAX_DEDUP_WINDOW_MS`` plus a clock-skew margin), at
        most ``REBUILD_RECORDS_PER_ID * log.dedup_max_ids`` of them; each record indexed
        under its own queue's window."""
        cache = self._cache
        assert cache is not None and part.log is not None
        guard = PlacementGuard(cache)
        index = DedupIndex(self.settings.log.dedup_max_ids)
        # the node holds only the queues it has used, so the scan covers the longest
        # window any queue may have (bounded by the record count below), and the queues
        # met in it are loaded to learn their own windows
        scan_ms = MAX_DEDUP_WINDOW_MS
        started = time.perf_counter()
        max_ids = self.settings.log.dedup_max_ids
        seen = await rebuild(
            part.log, index, wall_ms(), scan_ms + DEDUP_SKEW_MS if scan_ms else 0, guard.dedup_window_ms,
            max_records=REBUILD_RECORDS_PER_ID * max_ids,
            load_queues=lambda ids: cache.refresh(ids=ids, sync=False),
        )  # fmt: skip
        part.dedup = index
        part.log.on_rewind = index.forget_from  # offsets a full disk gave back are reused
        if seen:
            log.info(
                "partition %d: dedup index rebuilt from %d records (%d ids) in %.3fs",
                part.pp, seen, len(index), time.perf_counter() - started,
            )

    async def _on_lost(self, resource: str, token: int) -> None:
        if self._ownership is not None:
            await self._ownership.on_lost(resource, token)

    async def stop(self, *, release: bool = True) -> None:
        """Graceful stop (see module doc); ``release=False`` leaves leases and the
        registration to expire, as after a crash."""
        if self._md is None:
            return
        await self._teardown(release=release)
        log.info("write node %s stopped", self.node_id)

    @property
    def compactor(self) -> Compactor:
        if self._compactor is None:
            raise RuntimeError("service not started")
        return self._compactor

    async def _teardown(self, release: bool) -> None:
        if self._replication is not None:
            await self._replication.stop()
        if self._compactor is not None:
            await self._compactor.stop()
            self._compactor = None
        if self._ownership is not None:
            await self._ownership.stop(release=release)
        if self._keeper is not None:
            with contextlib.suppress(MetadataUnavailable, OSError):
                await self._keeper.stop(release=release)
        if self._runner is not None:
            await self._runner.cleanup()
        for sock in self._socks:
            sock.close()
        if self._traffic is not None:
            await self._traffic.stop()
        if self._fence is not None:
            await self._fence.stop()
        if self._cache is not None:
            await self._cache.stop()
        if self._listener is not None:
            await self._listener.stop()
        if self._md is not None:
            await self._md.stop()
        self._ownership = self._keeper = self._runner = self._traffic = self._replication = None
        self._socks = []
        self._cache = self._listener = self._md = self._fence = None
