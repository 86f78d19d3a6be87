"""MetadataStore: one client and every metadata store built on it.

The usual entry point for a role process::

    md = MetadataStore(settings.redis, url=redis_url, queue_defaults=settings.queues)
    await md.start()            # connects (PING)
    listener = md.event_listener(); await listener.start()
    cache = MapCache(md.queues, md.maps, listener); await cache.start()
    ...
    await cache.stop(); await listener.stop(); await md.stop()

Every store keeps its keys under ``settings.key_prefix``. ``stop()`` closes the
client; components built from it (listeners, caches, keepers) must be stopped
first. Redis failures reach callers as ``metadata.errors.MetadataUnavailable``
(``metadata.connection``); ``client`` is for code inside ``metadata/`` and tests.
"""

from __future__ import annotations

from vpq.config.settings import QueueDefaults, RedisSettings
from vpq.metadata.acks import AckStateStore
from vpq.metadata.cluster_shape import ClusterShape, claim_write_slot, get_or_create_shape, read_shape
from vpq.metadata.connection import ClientOptions, MetadataClient, client_from_settings
from vpq.metadata.contexts import ContextRegistry
from vpq.metadata.events import Announcer, EventListener
from vpq.metadata.fences import FenceStore
from vpq.metadata.groups import GroupStore
from vpq.metadata.keys import Keys
from vpq.metadata.leases import LeaseManager, NodeRegistry
from vpq.metadata.maps import MapStore
from vpq.metadata.partition_count import get_or_init_partition_count, read_partition_count
from vpq.metadata.partition_leaders import PartitionLeaders
from vpq.metadata.queues import QueueRegistry
from vpq.metadata.redrive import RedriveStore


class MetadataStore:
    def __init__(
        self,
        settings: RedisSettings,
        url: str | None = None,
        queue_defaults: QueueDefaults | None = None,
        *,
        options: ClientOptions | None = None,
    ) -> None:
        self.settings = settings
        self.client: MetadataClient = client_from_settings(settings, url, options)
        self.keys = Keys(settings.key_prefix)
        self.queues = QueueRegistry(self.client, self.keys, queue_defaults)
        self.contexts = ContextRegistry(self.client, self.keys)
        self.maps = MapStore(self.client, self.keys)
        self.nodes = NodeRegistry(self.client, self.keys)
        self.leases = LeaseManager(self.client, self.keys)
        self.groups = GroupStore(self.client, self.keys)
        self.acks = AckStateStore(self.client, self.keys)
        self.fences = FenceStore(self.client, self.keys, self.maps)
        self.leaders = PartitionLeaders(self.client, self.keys)
        self.redrive = RedriveStore(self.client, self.keys)
        self.announcer = Announcer(self.client, self.keys)

    async def start(self) -> None:
        """Check that Redis answers (``MetadataUnavailable`` otherwise) and store a map
        left in the earlier one-document form per queue (``MapStore.migrate_whole_map``)."""
        await self.ping()
        await self.maps.migrate_whole_map()

    async def ping(self) -> None:
        """One round trip to Redis; ``MetadataUnavailable`` when it does not answer."""
        await self.client.ping()

    async def get_or_init_partition_count(self, default: int) -> int:
        """The cluster's physical-partition count, ``default`` stored first when the
        cluster has none yet (``metadata.partition_count``)."""
        return await get_or_init_partition_count(self.client, self.keys, default)

    async def read_partition_count(self) -> int | None:
        """The stored physical-partition count, None before the cluster is created."""
        return await read_partition_count(self.client, self.keys)

    async def get_or_create_shape(self, want: ClusterShape) -> ClusterShape:
        """The cluster's shape, ``want`` stored first when there is none (``metadata.cluster_shape``)."""
        return await get_or_create_shape(self.client, self.keys, want)

    async def read_shape(self) -> ClusterShape | None:
        """The stored cluster shape, None before the first write node created it."""
        return await read_shape(self.client, self.keys)

    async def claim_write_slot(self, node_id: str, write_nodes: int, index: int | None = None) -> int:
        """``node_id``'s durable write-node index (``metadata.cluster_shape.claim_write_slot``)."""
        return await claim_write_slot(self.client, self.keys, node_id, write_nodes, index)

    async def stop(self) -> None:
        await self.client.aclose()

    def event_listener(self, *, use_pubsub: bool = True) -> EventListener:
        """A new (not started) listener polling every ``settings.poll_fallback_ms``."""
        return EventListener(self.client, self.keys, self.settings.poll_fallback_ms, use_pubsub=use_pubsub)
