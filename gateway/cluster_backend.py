"""``ClusterBackend``: the gateway's ``Backend`` (``gateway/backend.py``) over the real platform.

Parts (built in ``start()``, stopped in reverse by ``stop()``):

- ``MetadataStore`` (Redis), its ``EventListener`` and a ``MapCache`` (queues + placement
  map in memory, kept fresh by announcements);
- ``WriteNodeDirectory`` / ``ReadNodeDirectory`` (who owns which pp, which read node
  serves which group), refreshed by node announcements and on errors;
- one ``aiohttp.ClientSession`` (``node_rpc.call.node_session``: no connection cap, so
  consumers' long polls never hold up other calls) shared by ``WriteNodeClient`` and ``ReadNodeClient``,
  sending ``cluster_secret`` on every call (``node_rpc.cluster_auth``);
- the ``Appender`` (``produce_path.produce``) for produce, ``QueueAdmin`` for queue
  admin, ``GroupCaller`` for consumer calls, a ``TrafficMeter`` for queue traffic;
- a ``NodeMetricsScraper``: ``metrics_text()`` ends with every live node's metrics
  (``gateway.cluster_metrics``).

The physical partitions of the cluster are ``0 .. K-1`` with K the count stored in Redis
when the cluster was created (``metadata.partition_count``; the first process to start
stores ``settings.cluster.physical_partitions``), plus any pp the map places a queue on.

Produce: the queue's ``max_message_bytes`` is checked first (413 ``message_too_large``
with the index of the first oversize message, nothing appended), from the cached
registry; an unknown queue is looked up in Redis once, then 404. Consumer calls check
the queue the same way, then go to the group's read node (which creates the group and
the dead-letter queue ``{q}.{g}.dlq`` itself).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aiohttp

from vpq.common.errors import NotFound, PayloadTooLarge, Unavailable, VpqError
from vpq.common.lifecycle import close_all
from vpq.common.poll_body import PolledBody
from vpq.config.settings import Settings
from vpq.gateway.backend import JoinSpec
from vpq.gateway.cluster_elect import elect_leader, event_view
from vpq.gateway.cluster_groups import GroupCaller
from vpq.gateway.cluster_metrics import NodeMetricsScraper, registered_nodes
from vpq.metadata.api_errors import metadata_errors
from vpq.metadata.events import EventListener
from vpq.metadata.map_cache import MapCache
from vpq.metadata.partition_leaders import LeaderRecord
from vpq.metadata.queues import QueueRecord
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.call import node_session
from vpq.node_rpc.cluster_auth import client_headers
from vpq.node_rpc.node_directory import ReadNodeDirectory, WriteNodeDirectory
from vpq.node_rpc.node_pools import NodePools
from vpq.node_rpc.read_node_client import ReadNodeClient
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.produce_path.append_accumulator import AppendAccumulator
from vpq.produce_path.outgoing import OutgoingBatch, ProduceResults
from vpq.produce_path.produce import Appender, AppendPolicy
from vpq.queue_admin.cluster_queues import EMPTY_MAP, QueueAdmin
from vpq.queue_admin.log_ends import LogEnds
from vpq.traffic.cluster_traffic import TrafficMeter
from vpq.virtual_partitions.router import ProduceRouter

log = logging.getLogger("vpq.gateway.cluster")
T = TypeVar("T")
POLL_CONNECTIONS = 100_000
"""connections to one read node for polls: a waiting long poll holds one, so no bound
short of the file limit (as the aiohttp session, unbounded, did)"""


def replication_fields(
    rec: LeaderRecord | None, owner: str | None, names: dict[int, str], reported: dict[str, Any]
) -> dict[str, Any]:
    """``leader``, ``replicas``, ``in_sync_replicas``, ``leader_epoch`` (and the leader's
    ``high_watermark`` when it reported one, ``last_unclean_election`` when an operator
    forced one: ``gateway.cluster_elect``) of a partition: from its leadership record
    when replicated, else the single copy on its owner (epoch 0)."""
    if rec is None:
        copies = [owner] if owner is not None else []
        return {"leader": owner, "replicas": copies, "in_sync_replicas": copies, "leader_epoch": 0}

    def name(i: int) -> str:
        return names.get(i, f"w{i}")

    out: dict[str, Any] = {
        "leader": name(rec.leader) if rec.leader >= 0 else None,
        "replicas": [name(i) for i in rec.replicas],
        "in_sync_replicas": [name(i) for i in rec.isr],
        "leader_epoch": rec.epoch,
    }
    if isinstance(reported.get("high_watermark"), int):
        out["high_watermark"] = reported["high_watermark"]
    if isinstance(reported.get("replica_lag"), dict):
        out["replica_lag"] = reported["replica_lag"]
    if rec.unclean is not None:
        out["last_unclean_election"] = event_view(rec.unclean)
    return out


class ClusterBackend:
    """See the module docstring. ``policy`` tunes the produce retries and batch size
    (default: from ``settings.produce``); ``cluster_secret`` goes with every call to a
    node (``common.cluster_secret``)."""

    def __init__(
        self,
        settings: Settings,
        redis_url: str,
        *,
        policy: AppendPolicy | None = None,
        cluster_secret: str | None = None,
        counters_in_metrics_text: bool = True,
    ) -> None:
        """``counters_in_metrics_text=False``: ``metrics_text`` leaves out
        ``counters_text`` (a gateway worker's counters are added up over the workers)."""
        self._settings = settings
        self._counters_in_metrics_text = counters_in_metrics_text
        self._cluster_secret = cluster_secret
        self._redis_url = redis_url
        self._policy = policy or AppendPolicy.from_settings(settings.produce)
        self._partition_count = settings.cluster.physical_partitions
        self._md: MetadataStore | None = None
        self._listener: EventListener | None = None
        self._cache: MapCache | None = None
        self._session: aiohttp.ClientSession | None = None
        self._pools: NodePools | None = None
        self._poll_pools: NodePools | None = None
        self._writers: WriteNodeDirectory | None = None
        self._readers: ReadNodeDirectory | None = None
        self._write_client: WriteNodeClient | None = None
        self._read_client: ReadNodeClient | None = None
        self._appender: Appender | None = None
        self._admin: QueueAdmin | None = None
        self._batcher: AppendAccumulator | None = None
        self._groups: GroupCaller | None = None
        self._node_metrics: NodeMetricsScraper | None = None
        self.traffic = TrafficMeter()
        self._started = False

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        if self._started:
            return
        try:
            md = self._md = MetadataStore(self._settings.redis, url=self._redis_url, queue_defaults=self._settings.queues)
            await md.start()
            self._partition_count = await md.get_or_init_partition_count(self._settings.cluster.physical_partitions)
            listener = self._listener = md.event_listener()
            await listener.start()
            cache = self._cache = MapCache(
                md.queues, md.maps, listener, capacity=self._settings.redis.map_cache_queues
            )
            await cache.start()
            self._session = node_session(client_headers(self._cluster_secret))
            writers = self._writers = WriteNodeDirectory(md.nodes, md.leases, self._partition_count, md.leaders)
            readers = self._readers = ReadNodeDirectory(md.nodes, down_ttl_s=self._settings.redis.lease_ttl_ms / 1000.0)
            listener.add_callback(writers.on_event)
            listener.add_callback(readers.on_event)
            await writers.refresh()
            await readers.refresh()
            # appends and polls, the hot calls, go over lean keep-alive connections
            # (node_rpc.node_pools); a long poll holds its connection while it waits
            self._pools = NodePools(client_headers(self._cluster_secret), max_connections_per_node=256)
            self._write_client = WriteNodeClient(self._session, pools=self._pools)
            self._poll_pools = NodePools(client_headers(self._cluster_secret), max_connections_per_node=POLL_CONNECTIONS)
            self._read_client = ReadNodeClient(self._session, pools=self._poll_pools)
            batcher = self._batcher = AppendAccumulator(
                self._write_client,
                max_in_flight=self._settings.gateway.append_requests_in_flight,
                bulk_in_flight=self._settings.gateway.append_bulk_in_flight,
                bulk_bytes=self._settings.gateway.append_bulk_bytes,
                max_request_bytes=self._policy.max_request_bytes,
                max_batch_bytes=self._policy.max_batch_bytes,
            )
            await batcher.start()
            self._appender = Appender(cache, ProduceRouter(cache, md.contexts), writers, batcher, self._policy)
            self._admin = QueueAdmin(
                md, self._placeable_partitions, self.traffic, on_queue_change=cache.after_change,
                log_ends=LogEnds(writers, self._write_client),
            )
            self._groups = GroupCaller(readers)
            self._node_metrics = NodeMetricsScraper(self._session)
            self._started = True
        except BaseException:
            await self._close()
            raise

    async def stop(self) -> None:
        await self._close()

    async def _close(self) -> None:
        self._started = False
        if self._listener is not None:
            for d in (self._writers, self._readers):
                if d is not None:
                    self._listener.remove_callback(d.on_event)
        await close_all(
            (
                self._admin.stop if self._admin else None,
                self._batcher.stop if self._batcher else None,
                self._cache.stop if self._cache else None,
                self._listener.stop if self._listener else None,
                self._session.close if self._session else None,
                self._pools.stop if self._pools else None,
                self._poll_pools.stop if self._poll_pools else None,
                self._md.stop if self._md else None,
            ),
            log,
            "the cluster backend",
        )
        self._cache = self._listener = self._session = self._md = self._pools = self._poll_pools = None
        self._batcher = None

    def _placeable_partitions(self) -> list[int]:
        return list(range(self._partition_count))  # the admin adds the pps the map already uses

    def _require(self, part: T | None) -> T:
        if not self._started or part is None:
            raise Unavailable("not_ready", "the gateway backend is not started", retry_after=1.0)
        return part

    async def ready(self) -> bool:
        if not self._started or self._md is None or self._writers is None or self._readers is None:
            return False
        try:
            await self._md.ping()
            await self._writers.refresh()
            await self._readers.refresh()
        except Exception:
            return False
        if not self._writers.live_nodes() or not self._readers.live_nodes():
            return False
        owners = self._writers.owners()
        return all(owners.get(pp) is not None for pp in range(self._partition_count))

    # ---------------------------------------------------------------- queues
    async def put_queue(self, name: str, config: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        return await self._require(self._admin).put(name, config)

    async def get_queue(self, name: str) -> dict[str, Any]:
        return await self._require(self._admin).get(name)

    async def list_queues(self) -> list[dict[str, Any]]:
        return await self._require(self._admin).list()

    async def delete_queue(self, name: str) -> None:
        await self._require(self._admin).delete(name)

    async def _queue(self, name: str) -> QueueRecord:
        """The queue's record from the cache, looked up in Redis once on a miss."""
        cache = self._require(self._cache)
        rec = cache.queue(name)
        if rec is None:
            with metadata_errors():
                await cache.refresh([name], sync=False)
            rec = cache.queue(name)
        if rec is None:
            raise NotFound("queue_not_found", f"queue {name!r} does not exist", queue=name)
        return rec

    # ---------------------------------------------------------------- produce
    async def produce(self, queue: str, batch: OutgoingBatch) -> ProduceResults:
        appender = self._require(self._appender)
        rec = await self._queue(queue)
        limit = int(rec.config["max_message_bytes"])
        over = batch.first_over(limit)
        if over is not None:
            i, size = over
            raise PayloadTooLarge(
                "message_too_large",
                f"messages[{i}] is {size} bytes; queue {queue!r} accepts at most {limit}",
                index=i,
                size_bytes=size,
                max_message_bytes=limit,
            )
        with metadata_errors():
            results = await appender.append(queue, batch)
        self.traffic.record(queue, len(batch), batch.value_bytes(), results.virtual_partitions)
        return results

    # ---------------------------------------------------------------- consumers
    async def _group_call(self, queue: str, group: str, fn: Callable[[ReadNodeClient, str], Awaitable[T]]) -> T:
        caller = self._require(self._groups)
        client = self._require(self._read_client)
        await self._queue(queue)
        return await caller.call(queue, group, lambda address: fn(client, address))

    async def join(self, queue: str, group: str, spec: JoinSpec) -> dict[str, Any]:
        ctx = spec.context
        return await self._group_call(
            queue,
            group,
            lambda c, a: c.join(
                a, queue, group, consumer_id=spec.consumer_id, env=ctx.env, set_=ctx.set, lane=ctx.lane, start=spec.start
            ),
        )

    async def poll(
        self, queue: str, group: str, consumer_id: str, max_messages: int, wait_ms: int, ack: Sequence[str] = ()
    ) -> PolledBody:
        """The read node's answer passed through encoded (its body is the public answer)."""
        return await self._group_call(
            queue, group, lambda c, a: c.poll_body(a, queue, group, consumer_id, max_messages, wait_ms, ack)
        )

    async def ack(self, queue: str, group: str, consumer_id: str, ids: list[str]) -> int:
        return await self._group_call(queue, group, lambda c, a: c.ack(a, queue, group, consumer_id, ids))

    async def nack(self, queue: str, group: str, consumer_id: str, ids: list[str], delay_ms: int) -> int:
        return await self._group_call(queue, group, lambda c, a: c.nack(a, queue, group, consumer_id, ids, delay_ms))

    async def leave(self, queue: str, group: str, consumer_id: str) -> None:
        await self._group_call(queue, group, lambda c, a: c.leave(a, queue, group, consumer_id))

    async def group_info(self, queue: str, group: str) -> dict[str, Any]:
        return await self._group_call(queue, group, lambda c, a: c.group_info(a, queue, group))

    async def delete_group(self, queue: str, group: str) -> None:
        await self._group_call(queue, group, lambda c, a: c.delete_group(a, queue, group))

    async def redrive(self, queue: str, group: str, max_messages: int | None) -> int:
        return await self._group_call(queue, group, lambda c, a: c.redrive(a, queue, group, max_messages))

    # ---------------------------------------------------------------- cluster
    async def cluster(self) -> dict[str, Any]:
        md = self._require(self._md)
        writers = self._require(self._writers)
        readers = self._require(self._readers)
        client = self._require(self._write_client)
        with metadata_errors():
            write_nodes = await md.nodes.nodes("write")
            read_nodes = await md.nodes.nodes("read")
            await writers.refresh()
            epoch = await md.maps.epoch()
            records = await md.leaders.get_many(range(self._partition_count))
        listings = await asyncio.gather(*(client.partitions(n.address) for n in write_nodes), return_exceptions=True)
        reported: dict[int, dict[str, Any]] = {}
        reachable: dict[str, bool] = {}
        disks: dict[str, Any] = {}
        for node, listing in zip(write_nodes, listings, strict=True):
            reachable[node.node_id] = isinstance(listing, dict)
            if isinstance(listing, dict):
                if isinstance(listing.get("disk"), dict):
                    disks[node.node_id] = listing["disk"]
                for p in listing["partitions"]:
                    if isinstance(p, dict) and isinstance(p.get("id"), int):
                        reported[p["id"]] = {**p, "reporter": node.node_id}
            elif not isinstance(listing, VpqError):
                log.warning("listing partitions of %s failed: %r", node.address, listing)
        owners = writers.owners()
        pps = sorted(set(owners) | set(reported))
        names = {n.meta["index"]: n.node_id for n in write_nodes if isinstance(n.meta.get("index"), int)}
        partitions = []
        for pp in pps:
            ref = owners.get(pp)
            p = reported.get(pp, {})
            owner = ref.node_id if ref is not None else None
            partitions.append(
                {
                    "id": pp,
                    "owner": owner,
                    "end_offset": int(p.get("end_offset", 0)),
                    "start_offset": int(p.get("start_offset", 0)),
                    "bytes": int(p.get("bytes", 0)),
                    "online": bool(p.get("online", False)) and ref is not None,
                    **replication_fields(records.get(pp), owner, names, p),
                }
            )
        return {
            "write_nodes": [
                {"id": n.node_id, "address": n.address, "reachable": reachable.get(n.node_id, False), "meta": dict(n.meta),
                 **({"disk": disks[n.node_id]} if n.node_id in disks else {})}
                for n in write_nodes
            ],
            "read_nodes": [
                {"id": n.node_id, "address": n.address, "meta": dict(n.meta)} for n in read_nodes
            ],
            "physical_partitions": partitions,
            "epoch": epoch,
            "live_read_nodes_seen": len(readers.live_nodes()),
        }

    async def elect_leader(self, pp: str, node: str, unclean: bool) -> dict[str, Any]:
        md = self._require(self._md)
        client = self._require(self._write_client)
        with metadata_errors():
            return await elect_leader(md, client, self._partition_count, pp, node, unclean)

    async def current_map(self) -> dict[str, Any]:
        md = self._require(self._md)
        with metadata_errors():
            m = await md.maps.current()
        return m if m is not None else dict(EMPTY_MAP)

    async def map_history(self, limit: int) -> list[dict[str, Any]]:
        md = self._require(self._md)
        with metadata_errors():
            return await md.maps.history(limit)

    def counters_text(self) -> str:
        """This process's produce and consumer-call counters, Prometheus text."""
        s = self._appender.stats if self._appender is not None else None
        if s is None:
            return ""
        lines = [
            "# HELP vpq_produce_messages_total Messages appended durably through this gateway.",
            "# TYPE vpq_produce_messages_total counter",
            f"vpq_produce_messages_total {s.messages}",
            "# HELP vpq_produce_batches_total Record batches appended to write nodes.",
            "# TYPE vpq_produce_batches_total counter",
            f"vpq_produce_batches_total {s.batches}",
            "# HELP vpq_produce_failures_total Produce requests that failed after retries.",
            "# TYPE vpq_produce_failures_total counter",
            f"vpq_produce_failures_total {s.failures}",
            "# HELP vpq_produce_retries_total Append retries by reason.",
            "# TYPE vpq_produce_retries_total counter",
        ]
        lines += [f'vpq_produce_retries_total{{reason="{r}"}} {n}' for r, n in sorted(s.retries.items())]
        if self._groups is not None:
            lines += [
                "# HELP vpq_consumer_forwards_total Consumer calls forwarded to the group's owning read node.",
                "# TYPE vpq_consumer_forwards_total counter",
                f"vpq_consumer_forwards_total {self._groups.forwards}",
                "# HELP vpq_consumer_failovers_total Consumer calls retried on another read node.",
                "# TYPE vpq_consumer_failovers_total counter",
                f"vpq_consumer_failovers_total {self._groups.failovers}",
            ]
        return "\n".join(lines) + "\n"

    async def metrics_text(self) -> str:
        if not self._started or self._appender is None:
            return ""
        lines = [
            "# HELP vpq_cluster_map_epoch Placement map epoch in this gateway's cache.",
            "# TYPE vpq_cluster_map_epoch gauge",
            f"vpq_cluster_map_epoch {self._cache.epoch if self._cache else 0}",
            "# HELP vpq_cluster_nodes Live nodes as last seen by this gateway.",
            "# TYPE vpq_cluster_nodes gauge",
            f'vpq_cluster_nodes{{role="write"}} {len(self._writers.live_nodes()) if self._writers else 0}',
            f'vpq_cluster_nodes{{role="read"}} {len(self._readers.live_nodes()) if self._readers else 0}',
        ]
        own = "\n".join(lines) + "\n"
        if self._counters_in_metrics_text:
            own += self.counters_text()
        if self._md is None or self._node_metrics is None:
            return own
        return await self._node_metrics.scrape(own, await registered_nodes(self._md.nodes))
