"""Fixtures shared by the write-node service tests."""

from __future__ import annotations

import aiohttp
import pytest

from tests.write_nodes.test_service_helpers import STEADY_LEASE_MS, make_settings, open_metadata, place_queue
from vpq.write_nodes.service import WriteNodeService


@pytest.fixture
async def node(tmp_path, redis_url, key_prefix):
    """A 2-node cluster's node 0 (home of pp 0 and 2 of 4); queue 'q' with vp0->pp0,
    vp1->pp1, vp2->pp2, vp3->pp0 at epoch 1."""
    settings = make_settings(tmp_path, key_prefix, write_nodes=2, partitions=4, lease_ttl_ms=STEADY_LEASE_MS)
    md = await open_metadata(settings, redis_url)
    qid = await place_queue(md, "q", [0, 1, 2, 0])
    service = WriteNodeService(settings, "w0", 0, redis_url)
    await service.start()
    async with aiohttp.ClientSession() as http:
        yield service, md, qid, http
    await service.stop()
    await md.stop()
