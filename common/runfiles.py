"""Files under ``<data-dir>/run`` through which ``vpq up`` tells its children and
later commands (``vpq rebalance --data-dir``) how the running platform is set up."""

from __future__ import annotations

import os
from pathlib import Path

from vpq.config.settings import Settings


def run_dir(data_dir: Path) -> Path:
    return data_dir / "run"


def settings_path(data_dir: Path) -> Path:
    return run_dir(data_dir) / "settings.json"


def cluster_secret_path(data_dir: Path) -> Path:
    """The cluster secret ``vpq up`` creates when none is configured."""
    return run_dir(data_dir) / "cluster.secret"


def gateway_workers_dir(data_dir: Path) -> Path:
    """Where the workers of a gateway started with ``gateway.workers`` > 1 publish their
    private addresses (``gateway.worker_peers``)."""
    return run_dir(data_dir) / "gateway-workers"


def redis_url_path(data_dir: Path) -> Path:
    return run_dir(data_dir) / "redis.url"


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_settings(settings: Settings) -> Path:
    path = settings_path(settings.data_dir)
    _atomic_write(path, settings.model_dump_json(indent=2))
    return path


def read_settings(path: Path) -> Settings:
    """Load the settings a supervisor wrote; environment variables do not override them."""
    return Settings.model_validate_json(path.read_text(encoding="utf-8"))


def write_redis_url(data_dir: Path, url: str) -> None:
    _atomic_write(redis_url_path(data_dir), url + "\n")


def read_redis_url(data_dir: Path) -> str | None:
    path = redis_url_path(data_dir)
    if not path.is_file():
        return None
    return path.read_text(encoding="utf-8").strip() or None
