"""Shared fixtures: a real redis-server on a free port per test (or the server
named by VPQ_TEST_REDIS_URL when no binary is available), and metadata stores on it."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from tests.needs import missing
from vpq.common.redis_server import RedisServer, find_redis_server
from vpq.config.settings import RedisSettings
from vpq.metadata.store import MetadataStore

# how pytest-xdist (`-n N --dist loadgroup`, .ci/run) groups tests on workers
pytest_plugins = ["tests.xdist_scheduling"]

# Tests put their data on whatever disk the machine has. The product default keeps
# min(1 GiB, 5 %) of it free (produce answers 507 below), which on a nearly full CI disk
# would refuse every produce; test platforms keep 16 MiB instead (the full-disk tests set
# their own).
os.environ.setdefault("VPQ_LOG__MIN_FREE_BYTES", str(16 << 20))


@pytest.fixture
def redis_server(tmp_path):
    """A real redis-server the test owns and may kill or restart (AOF on).
    Skips only when neither a binary nor VPQ_TEST_REDIS_URL is available."""
    if find_redis_server() is None:
        missing("needs the redis-server binary (set VPQ_TEST_REDIS_URL to use the redis_url fixture)")
    server = RedisServer(data_dir=tmp_path / "redis", appendonly=True, appendfsync="always")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(tmp_path):
    """A Redis URL plus a key prefix unique to the test. Starts its own redis-server
    when the binary exists, else falls back to VPQ_TEST_REDIS_URL."""
    if find_redis_server() is not None:
        server = RedisServer(data_dir=tmp_path / "redis-url", appendonly=False)
        server.start()
        yield server.url
        server.stop()
        return
    url = os.environ.get("VPQ_TEST_REDIS_URL")
    if not url:
        pytest.fail("no redis-server binary and VPQ_TEST_REDIS_URL is not set")
    yield url


@pytest.fixture
def key_prefix():
    return f"vpqtest-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def redis_settings(key_prefix: str) -> RedisSettings:
    return RedisSettings(key_prefix=key_prefix, poll_fallback_ms=50)


@pytest.fixture
async def make_store(redis_url: str, redis_settings: RedisSettings) -> AsyncIterator[Callable[[], MetadataStore]]:
    """Factory of MetadataStores (each with its own client) on the test's Redis."""
    stores: list[MetadataStore] = []

    def make() -> MetadataStore:
        s = MetadataStore(redis_settings, url=redis_url)
        stores.append(s)
        return s

    yield make
    for s in stores:
        await s.stop()


@pytest.fixture
async def md(make_store: Callable[[], MetadataStore]) -> MetadataStore:
    """A started MetadataStore on the test's Redis (stopped with ``make_store``)."""
    s = make_store()
    await s.start()
    return s
