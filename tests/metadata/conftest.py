"""Fixtures for the metadata tests: stores on a real redis-server, closed after each test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from config.settings import RedisSettings
from metadata.store import MetadataStore


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
    s = make_store()
    await s.start()
    return s
