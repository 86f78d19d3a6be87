"""vpq settings: pydantic models, built once at the entry point and passed down.

Sources, highest priority first: explicit overrides (command-line flags),
``VPQ_`` environment variables (nested with ``__``, e.g. ``VPQ_LOG__FSYNC_POLICY``),
the TOML file given with ``--config`` (or ``VPQ_CONFIG``), then the defaults below.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

MiB = 1024 * 1024
DAY_MS = 24 * 3600 * 1000


class LogSettings(BaseModel):
    """Physical-partition log (write nodes)."""

    segment_bytes: int = Field(128 * MiB, ge=4096, description="roll a segment at this size")
    segment_ms: int = Field(7 * DAY_MS, ge=1, description="roll a segment at this age")
    index_interval_bytes: int = Field(4096, ge=1, description="bytes between sparse index entries")
    retention_bytes: int = Field(-1, description="per-partition size limit, -1 = unlimited")
    retention_ms: int = Field(7 * DAY_MS, description="delete whole segments older than this, -1 = forever")
    fsync_policy: Literal["group", "interval", "none"] = Field(
        "group", description="group: fsync per group commit (durable, default); interval: every fsync_interval_ms; none: never (experiments)"
    )
    fsync_interval_ms: int = Field(50, ge=1)
    max_group_bytes: int = Field(8 * MiB, ge=4096, description="largest write gathered into one group commit")
    checkpoint_interval_ms: int = Field(5000, ge=10)


class RedisSettings(BaseModel):
    url: str | None = Field(None, description="Redis URL; none means vpq starts its own embedded Redis")
    key_prefix: str = Field("vpq", pattern=r"^[A-Za-z0-9._:-]{1,64}$")
    lease_ttl_ms: int = Field(10000, ge=100)
    poll_fallback_ms: int = Field(1000, ge=10, description="metadata polling when pub/sub is quiet")


class ClusterSettings(BaseModel):
    write_nodes: int = Field(1, ge=1, le=64)
    read_nodes: int = Field(1, ge=1, le=64)
    physical_partitions: int = Field(4, ge=1, le=4096)
    single_process: bool = False


class AuthToken(BaseModel):
    token: str
    scopes: dict[str, list[str]] = Field(
        default_factory=dict, description="scope (produce|consume|admin) -> queue-name glob patterns"
    )


class GatewaySettings(BaseModel):
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
    auth_enabled: bool = False
    tokens: list[AuthToken] = Field(default_factory=list)


class QueueDefaults(BaseModel):
    virtual_partitions: int = 16
    max_virtual_partitions: int = 4096
    ordering: Literal["key", "none"] = "key"
    max_deliveries: int = 5
    visibility_timeout_ms: int = 30000
    max_message_bytes: int = MiB
    session_timeout_ms: int = 10000

    @field_validator("virtual_partitions", "max_virtual_partitions")
    @classmethod
    def _power_of_two(cls, v: int) -> int:
        if v < 1 or v & (v - 1):
            raise ValueError("must be a power of two")
        return v


class RebalanceSettings(BaseModel):
    master: str = "local[*]"
    stats_uri: str | None = Field(None, description="Spark-readable stats location; default <data_dir>/stats")
    window_ms: int = Field(10000, ge=100)
    min_partitions: int = 1
    max_partitions: int = 64
    target_imbalance: float = 1.10
    max_moves_per_run: int = 64
    min_improvement: float = 0.05
    max_stats_age_ms: int = Field(300000, ge=1000)


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
