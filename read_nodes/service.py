"""``ReadNodeService``: one read node (tailing, caching, per-queue index, delivery state).

``ReadNodeService(settings, node_id, redis_url, host="127.0.0.1", port=0)``;
``await start()`` builds, in order: the metadata store (Redis), its event
listener and map cache, the write-node directory and client, the record cache
and the tailer pool (one tailer per physical partition, shared by all groups),
the persisted-ack store, the produce path (for dead letters) and the queue
admin (for dead-letter queues and automatic splits), then serves the internal
HTTP API (``read_nodes.handlers``) on ``host:port`` (0: a free port; see
``.address``) and registers the node under role ``read`` with a TTL lease kept
alive by a ``LeaseKeeper``.

Tuning: ``settings.read_nodes`` (or an explicit ``options=ReadNodeOptions(...)``);
the produce path (dead letters) follows ``settings.produce``.

Groups (``host(queue, group)``): a group is served only while this node holds
the lease ``group:{queue}:{group}``. The first request for a group acquires it
(409 ``not_owner`` with detail ``owner`` when another live node holds it),
creates the group's start offsets when the group is new (a join; any other
request for an unknown group is 404 ``group_not_found``) and opens a
``GroupHost``, which restores the group's persisted state. A lease that is lost
(renewal refused, Redis away for a whole TTL, or a fenced ack save) closes its
host at once. Every ``tick_ms`` the service re-hosts groups whose queue config
changed and drops those whose queue was deleted.

``stop()`` stops gracefully: groups persist their ack state, leases are
released and the node deregisters, so another node can take over at once.
``stop(release=False)`` abandons everything instead, like a crash: nothing is
persisted or released, and the leases expire after their TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aiohttp
from aiohttp import web

from vpq.common.burst_accept import BurstSite
from vpq.common.errors import Conflict, NotFound
from vpq.common.lifecycle import close_all
from vpq.config.settings import Settings
from vpq.isolation.context import IsolationContext
from vpq.metadata.aio import cancel_and_wait
from vpq.metadata.api_errors import metadata_errors
from vpq.metadata.events import EventListener
from vpq.metadata.lease_keeper import LeaseKeeper
from vpq.metadata.leases import group_resource
from vpq.metadata.map_cache import MapCache
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.call import node_session
from vpq.node_rpc.cluster_auth import client_headers
from vpq.node_rpc.node_directory import WriteNodeDirectory
from vpq.node_rpc.node_pools import NodePools
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.produce_path.append_accumulator import AppendAccumulator
from vpq.produce_path.produce import Appender, AppendPolicy
from vpq.queue_admin.cluster_queues import QueueAdmin
from vpq.queue_admin.log_ends import LogEnds
from vpq.read_nodes.dead_letters import DeadLetterProducer
from vpq.read_nodes.group_host import GroupHost
from vpq.read_nodes.group_start import start_offsets
from vpq.read_nodes.handlers import build_app
from vpq.read_nodes.lineage_order import LineageOrder
from vpq.read_nodes.metrics import ReadNodeMetrics
from vpq.read_nodes.node_parts import NodeParts, ReadNodeOptions
from vpq.read_nodes.record_cache import RecordCache
from vpq.read_nodes.redrive import Redriver, WriteNodeLetters
from vpq.read_nodes.tailer import RecordSource
from vpq.read_nodes.tailer_pool import TailerPool
from vpq.traffic.cluster_traffic import TrafficMeter
from vpq.virtual_partitions.router import ProduceRouter

log = logging.getLogger("vpq.read_node")

ROLE = "read"


class ReadNodeService:
    def __init__(
        self,
        settings: Settings,
        node_id: str,
        redis_url: str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        options: ReadNodeOptions | None = None,
        advertise: str | None = None,
        cluster_secret: str | None = None,
    ) -> None:
        """``advertise`` (``host:port``) is the address registered for the gateways to
        reach this node (default: the bound ``host:port``); ``cluster_secret``
        (``common.cluster_secret``): every call to this node's internal API must carry
        it, and this node's calls to write nodes carry it."""
        self.settings = settings
        self._cluster_secret = cluster_secret
        self.node_id = node_id
        self.redis_url = redis_url
        self.host_name = host
        self.port = port
        self._advertise = advertise
        self.options = options or ReadNodeOptions.from_settings(settings.read_nodes)
        self.metrics = ReadNodeMetrics()
        self.parts: NodeParts | None = None
        self._md: MetadataStore | None = None
        self._listener: EventListener | None = None
        self._cache: MapCache | None = None
        self._session: aiohttp.ClientSession | None = None
        self._pools: NodePools | None = None
        self._accumulator: AppendAccumulator | None = None
        self._runner: web.AppRunner | None = None
        self._keeper: LeaseKeeper | None = None
        self._hosts: dict[tuple[str, str], GroupHost] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._contexts: dict[int, IsolationContext] = {}
        self._maintenance: asyncio.Task[None] | None = None
        self._redriver: Redriver | None = None
        self._redrive_locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._address = ""
        self._stopping = False
        self._partition_count = settings.cluster.physical_partitions

    @property
    def address(self) -> str:
        """``host:port`` registered for this node (after ``start``): ``advertise``, else the bound address."""
        return self._address

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self._close(release=True)
            raise

    async def _start(self) -> None:
        s = self.settings
        o = self.options
        md = self._md = MetadataStore(s.redis, url=self.redis_url, queue_defaults=s.queues)
        await md.start()
        listener = self._listener = md.event_listener()
        await listener.start()
        cache = self._cache = MapCache(md.queues, md.maps, listener, capacity=s.redis.map_cache_queues)
        await cache.start()
        self._session = node_session(client_headers(self._cluster_secret))
        self._partition_count = await md.read_partition_count() or s.cluster.physical_partitions
        writers = WriteNodeDirectory(md.nodes, md.leases, self._partition_count, md.leaders)
        listener.add_callback(writers.on_event)
        await writers.refresh()
        # tail reads and appends, the hot calls, go over lean keep-alive connections
        self._pools = NodePools(client_headers(self._cluster_secret), max_connections_per_node=1024)
        write_client = WriteNodeClient(self._session, pools=self._pools)
        source = RecordSource(write_client, writers, self._resolve_context, RecordCache(o.cache_bytes), o.fetch_max_bytes)
        pool = TailerPool(
            source, max_bytes=o.tail_max_bytes, wait_ms=o.tail_wait_ms, retry_ms=o.retry_ms,
            truncate_ms=o.index_truncate_ms, keep_offsets=o.index_keep_offsets,
            read_ahead_bytes=o.tail_read_ahead_bytes, cache_bytes=o.cache_bytes,
        )
        policy = AppendPolicy.from_settings(s.produce)
        accumulator = self._accumulator = AppendAccumulator(
            write_client, max_request_bytes=policy.max_request_bytes, max_batch_bytes=policy.max_batch_bytes
        )
        appender = Appender(cache, ProduceRouter(cache, md.contexts), writers, accumulator, policy)
        admin = QueueAdmin(
            md, self._placeable_partitions, TrafficMeter(), on_change=cache.refresh,
            log_ends=LogEnds(writers, write_client),
        )
        self.parts = NodeParts(
            settings=s, node_id=self.node_id, options=o, md=md, map_cache=cache, writers=writers,
            write_client=write_client, source=source, pool=pool, acks=md.acks, admin=admin,
            dead_letters=DeadLetterProducer(appender, admin, source),
        )
        self._redriver = Redriver(md, cache, WriteNodeLetters(writers, write_client, self._resolve_context), appender)
        self._runner = web.AppRunner(build_app(self, self._cluster_secret), access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        site = BurstSite(self._runner, self.host_name, self.port)
        await site.start()
        bound = self._runner.addresses[0]
        self._address = self._advertise or f"{self.host_name}:{bound[1]}"
        self._keeper = LeaseKeeper(
            md.leases, self.node_id, s.redis.lease_ttl_ms, on_lost=self._on_lost, nodes=md.nodes, role=ROLE,
            address=self._address,
        )
        await self._keeper.start()
        self._maintenance = asyncio.create_task(self._maintain(), name=f"vpq-read-node-{self.node_id}")
        log.info("read node %s listening on %s", self.node_id, self._address)

    async def stop(self, release: bool = True) -> None:
        """Graceful stop (see the module docstring); ``release=False`` simulates a crash."""
        await self._close(release)

    async def _close(self, release: bool) -> None:
        self._stopping = True
        if self._maintenance is not None:
            await cancel_and_wait(self._maintenance)
            self._maintenance = None
        hosts, self._hosts = self._hosts, {}
        for host in hosts.values():
            await host.close(persist=release)
        if self._keeper is not None:
            with contextlib.suppress(Exception):
                await self._keeper.stop(release=release)
            self._keeper = None
        if self.parts is not None:
            await self.parts.pool.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._listener is not None and self.parts is not None:
            self._listener.remove_callback(self.parts.writers.on_event)
        await close_all(
            (
                self._accumulator.stop if self._accumulator else None,
                self._session.close if self._session else None,
                self._pools.stop if self._pools else None,
                self._cache.stop if self._cache else None,
                self._listener.stop if self._listener else None,
                self._md.stop if self._md else None,
            ),
            log,
            f"read node {self.node_id}",
        )
        self._session = self._cache = self._listener = self._md = self._pools = None
        self._accumulator = None
        self._redriver = None
        self.parts = None

    def _placeable_partitions(self) -> list[int]:
        return list(range(self._partition_count))  # the admin adds the pps the map already uses

    async def _resolve_context(self, context_id: int) -> IsolationContext:
        ctx = self._contexts.get(context_id)
        if ctx is not None:
            return ctx
        assert self._md is not None
        try:
            env, set_, lane = await self._md.contexts.resolve(context_id)
            ctx = IsolationContext(env, set_, lane)
        except KeyError:
            log.error("record with unknown isolation context id %d: delivered as the default context", context_id)
            return IsolationContext()
        self._contexts[context_id] = ctx
        return ctx

    # ------------------------------------------------------------------- groups
    def _parts(self) -> NodeParts:
        if self.parts is None or self._stopping:
            raise Conflict("not_owner", f"read node {self.node_id} is stopping", owner=None)
        return self.parts

    async def host(self, queue: str, group: str, create_start: str | None = None) -> GroupHost:
        """The hosted group, acquiring its lease and restoring it on first use
        (``create_start``: the join's start position, which allows creating it)."""
        key = (queue, group)
        h = self._hosts.get(key)
        if h is not None and not h.closed:
            return h
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            h = self._hosts.get(key)
            if h is not None and not h.closed:
                return h
            with metadata_errors():
                h = await self._open_host(queue, group, create_start)
            self._hosts[key] = h
            return h

    async def _open_host(self, queue: str, group: str, create_start: str | None) -> GroupHost:
        parts = self._parts()
        md = parts.md
        if parts.map_cache.entry(queue) is None:
            await parts.map_cache.refresh([queue], sync=False)  # held from now on, while the group uses it
        rec = parts.map_cache.queue(queue) or await md.queues.get(queue)
        if rec is None:
            raise NotFound("queue_not_found", f"queue {queue!r} does not exist", queue=queue)
        grp = await md.groups.get_group(queue, group)
        if grp is None and create_start is None:
            raise NotFound("group_not_found", f"queue {queue!r} has no consumer group {group!r}", group=group)
        resource = group_resource(queue, group)
        assert self._keeper is not None
        token = await self._take_lease(queue, group, resource)
        try:
            starts = dict(grp.start_offsets) if grp is not None else {}
            if not starts:
                position = grp.start if grp is not None else create_start
                lineage = LineageOrder(await md.maps.lineage_all(queue))
                entry = parts.map_cache.entry(queue)
                placement = entry.placement if entry is not None and entry.placement is not None else ()
                computed = await start_offsets(position, lineage, placement, parts.writers, parts.write_client)  # type: ignore[arg-type]
                starts = await md.groups.set_start_offsets(queue, group, computed) if computed else {}
            host = GroupHost(parts, rec, group, token, self._fenced, self.metrics)
            try:
                await host.open(starts)
            except BaseException:
                await host.close(persist=False)
                raise
        except BaseException:
            with contextlib.suppress(Exception):
                await self._keeper.release(resource)
            raise
        return host

    async def delete_group(self, queue: str, group: str) -> None:
        """Delete the group and all its state (see the module docstring); 404
        ``queue_not_found`` / ``group_not_found`` when unknown."""
        key = (queue, group)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            parts = self._parts()
            md = parts.md
            resource = group_resource(queue, group)
            with metadata_errors():
                h = self._hosts.get(key)
                if h is not None and not h.closed:
                    await self._drop(h, persist=False, release=False)
                else:
                    if await md.queues.get(queue) is None:
                        raise NotFound("queue_not_found", f"queue {queue!r} does not exist", queue=queue)
                    if await md.groups.get_group(queue, group) is None:
                        raise NotFound("group_not_found", f"queue {queue!r} has no consumer group {group!r}", group=group)
                    await self._take_lease(queue, group, resource)
                existed = await md.groups.delete_group(queue, group)
            assert self._keeper is not None
            with contextlib.suppress(Exception):
                await self._keeper.release(resource)  # its key is gone already: this only forgets it
            if not existed:
                raise NotFound("group_not_found", f"queue {queue!r} has no consumer group {group!r}", group=group)
            log.info("deleted group %s of queue %s", group, queue)

    async def redrive(self, queue: str, group: str, max_messages: int | None) -> int:
        """Redrive the group's dead letters (``read_nodes.redrive``) while serving the
        group; how many were redriven."""
        await self.host(queue, group)  # the lease (or 409 not_owner / 404)
        key = (queue, group)
        lock = self._redrive_locks.get(key)
        if lock is None:
            lock = self._redrive_locks[key] = asyncio.Lock()
        async with lock:
            self._parts()
            assert self._redriver is not None
            with metadata_errors():
                return await self._redriver.redrive(queue, group, max_messages)

    async def _take_lease(self, queue: str, group: str, resource: str) -> int:
        """The group's lease token, acquired when not held (409 ``not_owner`` when
        another live node holds it)."""
        assert self._keeper is not None
        md = self._parts().md
        token = self._keeper.token(resource)
        if token is None:
            token = await self._keeper.acquire(resource)
            if token is None:
                owner = await md.leases.owner(resource)
                if owner is None:
                    token = await self._keeper.acquire(resource)
                if token is None:
                    raise Conflict(
                        "not_owner", f"group {group!r} of queue {queue!r} is served by another read node",
                        owner=owner.node_id if owner is not None else None,
                    )
        return token

    async def _drop(self, host: GroupHost, persist: bool, release: bool) -> None:
        key = (host.queue, host.group)
        if self._hosts.get(key) is host:
            del self._hosts[key]
        await host.close(persist=persist)
        if release and self._keeper is not None:
            with contextlib.suppress(Exception):
                await self._keeper.release(group_resource(host.queue, host.group))

    async def _on_lost(self, resource: str, token: int) -> None:
        for host in list(self._hosts.values()):
            if group_resource(host.queue, host.group) == resource and host.token == token:
                log.warning("lost the lease of %s/%s: no longer serving it", host.queue, host.group)
                await self._drop(host, persist=False, release=False)

    async def _fenced(self, host: GroupHost) -> None:
        # called from the host's own task: close it from another task
        asyncio.get_running_loop().create_task(self._drop(host, persist=False, release=True))

    async def _maintain(self) -> None:
        interval = self.options.tick_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            for key, host in list(self._hosts.items()):
                try:
                    if host.gone:
                        log.info("queue %s was deleted: dropping group %s", host.queue, host.group)
                        await self._drop(host, persist=False, release=True)
                    elif host.needs_reload:
                        log.info("queue %s config changed: re-hosting group %s", host.queue, host.group)
                        await self._drop(host, persist=True, release=False)
                        with contextlib.suppress(Exception):
                            await self.host(*key)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("maintenance of %s/%s failed", host.queue, host.group)

    # -------------------------------------------------------------- operations
    def hosted(self) -> dict[tuple[str, str], GroupHost]:
        return dict(self._hosts)

    async def persist_now(self) -> None:
        """Save every hosted group's ack state now (tests, operations)."""
        for host in list(self._hosts.values()):
            await host.persist_now()

    def status(self) -> dict[str, Any]:
        parts = self.parts
        groups = [
            {"queue": h.queue, "group": h.group, "token": h.token, **h.stats()} for h in self._hosts.values()
        ]
        tailers = []
        cache: dict[str, Any] = {}
        if parts is not None:
            for pp, t in sorted(parts.pool.tailers().items()):
                tailers.append(
                    {"pp": pp, "records_tailed": t.records_tailed, "records_indexed_only": t.records_indexed_only,
                     "errors": t.errors, "log_start": t.log_start,
                     "known_end": t.known_end, "index_entries": t.index.entries(), "readers": t.listeners}
                )
            st = parts.source.cache.stats()
            cache = {"entries": st.entries, "bytes": st.bytes, "hit_ratio": st.hit_ratio, "fetches": parts.source.fetches}
        return {"node_id": self.node_id, "address": self._address, "groups": groups, "tailers": tailers, "cache": cache}
