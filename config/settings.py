"""vpq settings: pydantic models, built once at the entry point and passed down.

Sources, highest priority first: explicit overrides (command-line flags, including
``--set KEY=VALUE``: ``config.overrides``), ``VPQ_`` environment variables (nested
with ``__``, e.g. ``VPQ_LOG__FSYNC_POLICY``), the TOML file given with ``--config``
(or ``VPQ_CONFIG``), then the defaults below.

Every section refuses a key it does not know (a typo in a TOML file, a ``VPQ_`` variable
or a ``--set`` is an error naming it, not a silently ignored setting).

The sections ``read_nodes``, ``produce``, ``rebalance.publisher`` and ``redis.client``
are the single source of the defaults of ``ReadNodeOptions``, ``AppendPolicy``,
``PublisherOptions`` and ``ClientOptions``: each of those dataclasses has a
``from_settings(section)`` constructor, and the services build them from the
settings object they are given (``tests/config`` checks that the field names and
defaults agree). ``config/default.toml`` lists every key with its default.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from vpq.config.redis_url import check_redis_url

KiB = 1024
MiB = 1024 * KiB
DAY_MS = 24 * 3600 * 1000


class LogSettings(BaseModel):
    """Physical-partition log (write nodes)."""

    model_config = ConfigDict(extra="forbid")

    segment_bytes: int = Field(128 * MiB, ge=4096, description="roll a segment at this size")
    segment_ms: int = Field(7 * DAY_MS, ge=1, description="roll a segment at this age")
    index_interval_bytes: int = Field(4096, ge=1, description="bytes between sparse index entries")
    retention_bytes: int = Field(-1, description="per-partition size limit, -1 = unlimited")
    retention_ms: int = Field(7 * DAY_MS, description="delete whole segments older than this, -1 = forever")
    fsync_policy: Literal["group", "interval", "none"] = Field(
        "group", description="group: fsync per group commit (durable, default); interval: every fsync_interval_ms; none: never (experiments)"
    )
    fsync_interval_ms: int = Field(50, ge=1)
    inline_commit_idle_ms: float = Field(
        2.0, ge=0.0, le=1000.0, description="a write that finds the node's disks idle this long is written and "
        "synced on the event loop, without the I/O thread's hand-offs (lower latency at low rates); 0 = never",
    )
    max_group_bytes: int = Field(8 * MiB, ge=4096, description="largest write gathered into one group commit")
    checkpoint_interval_ms: int = Field(5000, ge=10)
    compaction_interval_ms: int = Field(
        60000, ge=10, description="how often a write node compacts its partitions (deleted and expired queues)"
    )
    compaction_min_dead_ratio: float = Field(
        0.5, ge=0.0, le=1.0, description="compact a sealed segment once this share of its bytes is dead"
    )
    compaction_max_bytes_per_s: int = Field(
        128 * MiB, ge=0, description="read rate limit of compaction per partition (0 = none)"
    )
    compaction_duty_cycle: float = Field(
        0.5, gt=0.0, le=1.0, description="share of the time a compaction pass may work; it sleeps the rest"
    )
    dedup_max_ids: int = Field(
        1_000_000, ge=1, description="dedup ids indexed per partition (~170 bytes each); beyond, the oldest go first"
    )
    min_free_bytes: int = Field(
        -1, ge=-1, description="a write node refuses produce (507) when its data directory's file system "
        "would have less free; -1 = 1 GiB or 5 % of the file system, whichever is smaller",
    )


class RedisClientSettings(BaseModel):
    """Timeouts, retries and pool of every metadata Redis client (``metadata.connection.ClientOptions``)."""

    model_config = ConfigDict(extra="forbid")

    socket_timeout: float = Field(5.0, gt=0, description="seconds a Redis command may take before it is retried")
    connect_timeout: float = Field(2.0, gt=0, description="seconds to open a connection")
    retries: int = Field(5, ge=0, description="quick retries of a command after a connection error or timeout")
    backoff_base: float = Field(0.02, gt=0, description="first retry backoff in seconds (doubles each retry)")
    backoff_cap: float = Field(0.5, gt=0, description="largest retry backoff in seconds")
    health_check_interval: int = Field(10, ge=0, description="seconds an idle connection may sit before a PING check")
    max_connections: int = Field(100, ge=1, description="connections per client; more commands wait for a free one")
    pool_timeout: float = Field(10.0, gt=0, description="seconds a command waits for a free connection")
    replica_wait_ms: int = Field(
        1000, ge=1, le=60000,
        description="how long a change that must not be lost (map epoch, partition leadership, queue record) "
        "waits for a Redis replica's acknowledgement (WAIT) when the master has one; fails after it",
    )
    replica_check_s: float = Field(
        5.0, gt=0, description="seconds the master's count of online replicas is cached (INFO replication)"
    )

    @model_validator(mode="after")
    def _wait_below_socket_timeout(self) -> RedisClientSettings:
        if self.replica_wait_ms / 1000.0 >= self.socket_timeout:
            raise ValueError(
                f"replica_wait_ms {self.replica_wait_ms} must be below socket_timeout ({self.socket_timeout} s)"
            )
        return self


class RedisSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(
        None,
        description="Redis URL (redis://, rediss://, unix:// or redis+sentinel://h1:p1,h2:p2/master-name); "
        "none means vpq starts its own embedded Redis",
    )
    key_prefix: str = Field("vpq", pattern=r"^[A-Za-z0-9._:-]{1,64}$")
    lease_ttl_ms: int = Field(10000, ge=100)
    poll_fallback_ms: int = Field(1000, ge=10, description="metadata polling when pub/sub is quiet")
    map_cache_queues: int = Field(
        100_000, ge=1, description="queues each process keeps in its placement-map cache (least recently used dropped)"
    )
    client: RedisClientSettings = RedisClientSettings()

    @field_validator("url")
    @classmethod
    def _url_parses(cls, url: str | None) -> str | None:
        return None if url is None else check_redis_url(url)


class ClusterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    write_nodes: int = Field(1, ge=1, le=64)
    read_nodes: int = Field(1, ge=1, le=64)
    physical_partitions: int = Field(4, ge=1, le=4096)
    single_process: bool = False
    replication_factor: int = Field(
        1, ge=1, le=64, description="copies of each physical partition, on distinct write nodes (at most write_nodes)"
    )
    min_insync: int = Field(
        0, ge=0, le=64, description="produce answers 503 while fewer replicas are in sync; 0 = replication_factor"
    )
    replica_lag_max_ms: int = Field(
        3000, ge=50, description="a follower not caught up with the leader for this long leaves the in-sync set"
    )
    replica_fetch_wait_ms: int = Field(500, ge=1, le=30000, description="long-poll of a follower's fetch")
    secret_file: Path | None = Field(
        None,
        description="file holding the secret every node-to-node call carries (None: calls are not checked; "
        "vpq up then creates <data_dir>/run/cluster.secret; vpq serve --cluster-secret-file)",
    )

    @model_validator(mode="after")
    def _replication_fits(self) -> ClusterSettings:
        if self.replication_factor > self.write_nodes:
            raise ValueError(
                f"replication_factor {self.replication_factor} exceeds write_nodes {self.write_nodes}"
            )
        if self.min_insync > self.replication_factor:
            raise ValueError(f"min_insync {self.min_insync} exceeds replication_factor {self.replication_factor}")
        return self

    @property
    def effective_min_insync(self) -> int:
        return self.min_insync or self.replication_factor


class AuthToken(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str
    scopes: dict[str, list[str]] = Field(
        default_factory=dict, description="scope (produce|consume|admin) -> queue-name glob patterns"
    )


class GatewaySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_request_bytes: int = Field(16 * MiB, ge=1024)
    append_requests_in_flight: int = Field(
        1,
        ge=1,
        le=64,
        description="appends the gateway has in flight to one write node; produce requests arriving "
        "meanwhile leave together as one, one batch per partition (produce_path.append_accumulator)",
    )
    append_bulk_in_flight: int = Field(
        2,
        ge=1,
        le=64,
        description="appends the gateway may have in flight to one write node when the produce calls "
        "waiting for it add up to append_bulk_bytes (big calls need no merging; produce_path.append_accumulator)",
    )
    append_bulk_bytes: int = Field(
        512 * KiB,
        ge=1,
        description="bytes of waiting produce calls that let an append leave beside the ones in flight",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="gateway processes sharing the host and port (SO_REUSEPORT); /metrics and queue "
        "traffic add up every worker's share (gateway.worker_peers)",
    )
    produce_lane: bool = Field(
        True,
        description="answer plain produce requests in the gateway's fast lane (gateway.produce_lane); "
        "false: every request goes through the aiohttp application",
    )
    auth_enabled: bool = False
    tokens: list[AuthToken] = Field(default_factory=list)


class QueueDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    virtual_partitions: int = 16
    max_virtual_partitions: int = 4096
    ordering: Literal["key", "none"] = "key"
    max_deliveries: int = 5
    visibility_timeout_ms: int = 30000
    max_message_bytes: int = MiB
    session_timeout_ms: int = 10000
    dedup_window_ms: int = Field(300_000, ge=0, le=3_600_000, description="a new queue's dedup window; 0 = off")

    @field_validator("virtual_partitions", "max_virtual_partitions")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v < 1 or v & (v - 1):
            raise ValueError("must be a power of two")
        return v


class ReadNodeSettings(BaseModel):
    """Read-node tuning (``read_nodes.node_parts.ReadNodeOptions``; durations in ms)."""

    model_config = ConfigDict(extra="forbid")

    cache_bytes: int = Field(
        128 * MiB, ge=1, description="bound of the decoded-record cache shared by all groups (payload plus "
        "about 480 bytes per record: 128 MiB hold about 80,000 records of 1 KiB)",
    )
    tail_max_bytes: int = Field(MiB, ge=1, description="size of each tail read from a write node")
    tail_wait_ms: int = Field(1000, ge=0, le=30000, description="long-poll of each tail read")
    tail_read_ahead_bytes: int = Field(
        32 * MiB, ge=0, description="a tailer decodes and caches at most this far past its most advanced reader "
        "(and at most cache_bytes / (2 x tailers)); further reads are only indexed and read back when a reader "
        "comes to them (0: no bound)",
    )
    index_truncate_ms: int = Field(1000, ge=0, description="at most this often a tailer drops old index entries")
    index_keep_offsets: int = Field(
        1_000_000, ge=0, description="index entries kept below every reader's cursor (a group that starts or is "
        "taken over within that window needs no re-read of the pp)",
    )
    fetch_max_bytes: int = Field(MiB, ge=1, description="size of a read that refills the cache after a miss")
    max_unacked: int = Field(
        20_000, ge=1, description="per group, messages held ready for live consumers before ingestion of new "
        "keys pauses",
    )
    key_read_ahead: int = Field(
        1000, ge=1, description="messages of one key held in memory before its later ones are parked in the log"
    )
    blocked_read_ahead: int = Field(
        20_000, ge=1, description="messages held, over all keys, behind runs in flight before more are parked"
    )
    ingest_batch: int = Field(128, ge=1, description="index entries looked at per pp per ingestion pass")
    tick_ms: int = Field(
        100, ge=1, description="period of a group's housekeeping (timeouts, idle consumers, dead letters, changes)"
    )
    persist_interval_ms: int = Field(100, ge=1, description="ack state saved at most this often when it changed")
    heartbeat_interval_ms: int = Field(
        1000, ge=1, description="a consumer's Redis session refreshed at most this often"
    )
    lineage_reload_ms: int = Field(
        200, ge=0, description="at most one lineage reload per group this often when a record lies outside it"
    )
    unknown_grace_ms: int = Field(
        5000, ge=0, description="a record the group's lineage still does not know after a reload is ingested "
        "anyway after this long",
    )
    retry_ms: int = Field(200, ge=1, description="pause before a failed tail read is retried")
    steal_when_idle: bool = Field(
        True, description="a consumer with nothing of its own to do helps the busiest members (per-key order kept)"
    )


class ProduceSettings(BaseModel):
    """Retry budget and batch sizes of the produce path, in the gateway and in read nodes
    (dead letters): ``write_nodes.produce.AppendPolicy``; durations in seconds."""

    model_config = ConfigDict(extra="forbid")

    budget_s: float = Field(5.0, gt=0, description="time a produce request may spend retrying before 503")
    backoff_initial_s: float = Field(0.02, gt=0, description="first retry backoff (doubles each retry)")
    backoff_max_s: float = Field(0.5, gt=0, description="largest retry backoff")
    max_batch_bytes: int = Field(4 * MiB, ge=1, description="largest part of one partition in one append")
    max_request_bytes: int = Field(
        16 * MiB, ge=1, le=32 * MiB, description="how much the accumulator merges into one request to a write node "
        "(at most 32 MiB: write nodes accept request bodies of at least 64 MiB)",
    )
    retry_after_s: float = Field(1.0, ge=0, description="Retry-After of a produce answered 503")


class PublisherSettings(BaseModel):
    """Bounds of a remap cut-over (``spark_rebalance.publisher.PublisherOptions``)."""

    model_config = ConfigDict(extra="forbid")

    fence_ttl_ms: int = Field(
        60_000, ge=1, description="how long a cut-over may keep vps fenced before another run may recover it"
    )
    lineage_margin_ms: int = Field(
        10_000, ge=0, description="no lineage move starts later than fence_ttl_ms - lineage_margin_ms after fencing"
    )
    fence_call_timeout_s: float = Field(5.0, gt=0, description="one fence call to a write node")
    fence_budget_s: float = Field(15.0, gt=0, description="all fence attempts for one pp")
    retry_backoff_s: float = Field(0.05, ge=0, description="pause between fence attempts")
    cas_attempts: int = Field(32, ge=1, description="compare-and-swap attempts per publish before giving up")

    @model_validator(mode="after")
    def _margin_below_ttl(self) -> PublisherSettings:
        if self.lineage_margin_ms >= self.fence_ttl_ms:
            raise ValueError("need lineage_margin_ms < fence_ttl_ms")
        return self


class RebalanceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    master: str = "local[*]"
    stats_uri: str | None = Field(
        None,
        description="where write nodes write traffic statistics and the Spark job reads them: a directory "
        "path or file: URI (on a cluster, a shared mount every host and Spark executor sees at that path), "
        "or any URI Spark reads (hdfs://, s3a://...: read by the job only; write nodes cannot write there); "
        "default <data_dir>/stats",
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description="Spark configuration for the remap job's session (spark.executor.memory, "
        "spark.driver.host, ...), applied over vpq's defaults; --set rebalance.spark_conf.KEY=VALUE sets one",
    )
    window_ms: int = Field(10000, ge=100)
    min_partitions: int = 1
    max_partitions: int = 64
    target_imbalance: float = 1.10
    max_moves_per_run: int = 64
    min_improvement: float = 0.05
    max_stats_age_ms: int = Field(300000, ge=1000)
    publisher: PublisherSettings = PublisherSettings()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="VPQ_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    data_dir: Path = Path(".vpq")
    log: LogSettings = LogSettings()
    redis: RedisSettings = RedisSettings()
    cluster: ClusterSettings = ClusterSettings()
    gateway: GatewaySettings = GatewaySettings()
    queues: QueueDefaults = QueueDefaults()
    rebalance: RebalanceSettings = RebalanceSettings()
    read_nodes: ReadNodeSettings = ReadNodeSettings()
    produce: ProduceSettings = ProduceSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        toml_file = _CONFIG_FILE.get("path")
        if toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_file))
        return tuple(sources)


# set only for the duration of load_settings(); pydantic-settings asks for sources on the class
_CONFIG_FILE: dict[str, Path | None] = {"path": None}


def _deep_set(target: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        target = target.setdefault(p, {})
    target[parts[-1]] = value


def load_settings(config_file: str | Path | None = None, overrides: dict[str, Any] | None = None) -> Settings:
    """Build the settings once. ``overrides`` maps dotted names (``cluster.write_nodes``) to values;
    ``None`` values are ignored so command-line flags that were not given do not mask other sources."""
    path = config_file or os.environ.get("VPQ_CONFIG")
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"config file not found: {path}")
    init: dict[str, Any] = {}
    for k, v in (overrides or {}).items():
        if v is not None:
            _deep_set(init, k, v)
    _CONFIG_FILE["path"] = path
    try:
        return Settings(**init)
    finally:
        _CONFIG_FILE["path"] = None
