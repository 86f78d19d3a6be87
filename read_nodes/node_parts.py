"""The node-wide parts every hosted group uses, and the read node's tuning knobs.

``ReadNodeOptions`` is the read node's tuning, built from the ``[read_nodes]``
settings section (``ReadNodeOptions.from_settings``); the defaults suit a single
machine. Everything else comes from ``Settings`` (session timeout and queue
defaults from ``settings.queues``, the lease TTL from ``settings.redis.lease_ttl_ms``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from vpq.config.settings import ReadNodeSettings, Settings
from vpq.metadata.acks import AckStateStore
from vpq.metadata.map_cache import MapCache
from vpq.metadata.store import MetadataStore
from vpq.node_rpc.node_directory import WriteNodeDirectory
from vpq.node_rpc.write_node_client import WriteNodeClient
from vpq.queue_admin.cluster_queues import QueueAdmin
from vpq.read_nodes.dead_letters import DeadLetterProducer
from vpq.read_nodes.tailer import RecordSource
from vpq.read_nodes.tailer_pool import TailerPool


@dataclass(frozen=True, slots=True)
class ReadNodeOptions:
    """Read-node tuning (all durations in ms).

    - ``cache_bytes``: bound of the decoded-record cache shared by all groups, in
      bytes the process really holds (payload plus ``messages.RECORD_OVERHEAD_BYTES``
      per record): 128 MiB hold about 80,000 records of 1 KiB;
    - ``tail_max_bytes`` / ``tail_wait_ms``: size and long-poll of each tail read;
    - ``tail_read_ahead_bytes``: a tailer decodes and caches at most this far past its
      most advanced reader (and at most cache_bytes / (2 x tailers)); further reads
      are only indexed and read back when a reader comes to them (0: no bound);
    - ``index_truncate_ms`` / ``index_keep_offsets``: at most this often, a tailer
      drops the index entries more than ``index_keep_offsets`` offsets below every
      reader's cursor (a group that starts or is taken over within that window
      needs no re-read of the pp);
    - ``fetch_max_bytes``: size of a read that refills the cache after a miss;
    - ``max_unacked``: per group, messages held ready for live consumers before
      ingestion of new keys pauses (``read_nodes.delivery``);
    - ``key_read_ahead`` / ``blocked_read_ahead``: messages of one key held in
      memory before its later ones are parked in the log, and over all keys held
      behind runs in flight (``read_nodes.delivery``);
    - ``ingest_batch``: index entries looked at per pp per ingestion pass (small: joins and
      polls wait for the step in progress; 512 made 64 concurrent joins on a group with a
      12,800-message backlog take 0.4 to 0.5 s, 128 makes it 0.2 to 0.3 s);
    - ``tick_ms``: period of a group's housekeeping (timeouts, idle consumers,
      dead letters, config and map changes);
    - ``persist_interval_ms``: ack state saved at most this often when it changed;
    - ``heartbeat_interval_ms``: a consumer's Redis session is refreshed at most
      this often (the node itself sees every poll);
    - ``lineage_reload_ms``: at most one lineage reload per group this often when
      a record lies outside the cached lineage;
    - ``unknown_grace_ms``: see ``read_nodes.ingestor``;
    - ``steal_when_idle``: see ``read_nodes.delivery`` (on: a consumer with nothing
      of its own to do helps the busiest members; per-key order is unaffected).
    """

    cache_bytes: int = 128 * 1024 * 1024
    tail_max_bytes: int = 1024 * 1024
    tail_wait_ms: int = 1000
    tail_read_ahead_bytes: int = 32 * 1024 * 1024
    index_truncate_ms: int = 1000
    index_keep_offsets: int = 1_000_000
    fetch_max_bytes: int = 1024 * 1024
    max_unacked: int = 20_000
    key_read_ahead: int = 1000
    blocked_read_ahead: int = 20_000
    ingest_batch: int = 128
    tick_ms: int = 100
    persist_interval_ms: int = 100
    heartbeat_interval_ms: int = 1000
    lineage_reload_ms: int = 200
    unknown_grace_ms: int = 5000
    retry_ms: int = 200
    steal_when_idle: bool = True

    @classmethod
    def from_settings(cls, section: ReadNodeSettings) -> ReadNodeOptions:
        """The options of the ``[read_nodes]`` settings section (same field names)."""
        return cls(**section.model_dump())


def wall_ms() -> int:
    """Unix time in ms (record timestamps are on this clock)."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """The clock of the delivery state (visibility deadlines, sessions)."""
    return time.monotonic_ns() // 1_000_000


@dataclass(slots=True)
class NodeParts:
    """Built by ``ReadNodeService.start()``; shared by its ``GroupHost``s."""

    settings: Settings
    node_id: str
    options: ReadNodeOptions
    md: MetadataStore
    map_cache: MapCache
    writers: WriteNodeDirectory
    write_client: WriteNodeClient
    source: RecordSource
    pool: TailerPool
    acks: AckStateStore
    admin: QueueAdmin
    dead_letters: DeadLetterProducer

    @property
    def session_timeout_ms(self) -> int:
        return self.settings.queues.session_timeout_ms
