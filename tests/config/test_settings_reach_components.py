"""Settings given as ``--set`` reach the running components: a read node and the
gateway's backend, built (as ``vpq up`` and the roles' ``main`` build them) from the
settings file the supervisor hands its children, use the configured values."""

from __future__ import annotations

import time

import orjson
import pytest

from vpq.common.errors import Unavailable
from vpq.common.runfiles import read_settings, write_settings
from vpq.config.overrides import parse_assignments
from vpq.config.settings import Settings, load_settings
from vpq.gateway.backend import ResolvedMessage
from vpq.gateway.cluster_backend import ClusterBackend
from vpq.isolation.context import IsolationContext
from vpq.produce_path.outgoing import OutgoingBatch
from vpq.read_nodes.service import ReadNodeService


def settings_from_flags(tmp_path, key_prefix: str, *assignments: str) -> Settings:
    """What a child process of ``vpq up --set ...`` reads back."""
    flags = parse_assignments(assignments)
    s = load_settings(None, {**flags, "data_dir": tmp_path, "redis.key_prefix": key_prefix,
                             "cluster.physical_partitions": 2})
    return read_settings(write_settings(s))


async def test_read_node_runs_with_the_configured_tuning(tmp_path, redis_url: str, key_prefix: str) -> None:
    s = settings_from_flags(
        tmp_path, key_prefix, "read_nodes.cache_bytes=65536", "read_nodes.max_unacked=321",
        "read_nodes.tail_wait_ms=250", "redis.client.max_connections=9",
    )
    node = ReadNodeService(s, "r0", redis_url)
    await node.start()
    try:
        parts = node.parts
        assert parts is not None
        assert parts.source.cache.max_bytes == 65536
        assert (parts.options.max_unacked, parts.options.tail_wait_ms) == (321, 250)
        assert parts.md.client.connection_pool.max_connections == 9
    finally:
        await node.stop()


async def test_gateway_produce_gives_up_after_the_configured_budget(tmp_path, redis_url: str, key_prefix: str) -> None:
    """No write node is up: produce retries within ``produce.budget_s``, then answers
    503 with ``produce.retry_after_s``."""
    s = settings_from_flags(tmp_path, key_prefix, "produce.budget_s=0.3", "produce.retry_after_s=7")
    backend = ClusterBackend(s, redis_url)
    await backend.start()
    try:
        await backend.put_queue("q", {})
        batch = OutgoingBatch.from_messages([ResolvedMessage("k", orjson.dumps(1), True, {}, IsolationContext())])
        t0 = time.monotonic()
        with pytest.raises(Unavailable) as info:
            await backend.produce("q", batch)
        elapsed = time.monotonic() - t0
    finally:
        await backend.stop()
    assert info.value.retry_after == 7
    assert elapsed < 2.5  # within 0.3 s of retries and their backoff; the default budget would take 4.5 s or more
