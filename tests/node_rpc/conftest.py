"""Fixtures shared by the node-client tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from vpq.node_rpc.node_pools import NodePools


@pytest.fixture(params=["aiohttp", "node-pools"])
async def pools(request: pytest.FixtureRequest) -> AsyncIterator[NodePools | None]:
    """A client's hot calls over aiohttp (``call_node``, None) and over
    ``node_rpc.node_pools``: each test runs both ways and must get the same answers."""
    if request.param == "aiohttp":
        yield None
        return
    pools = NodePools({})
    yield pools
    await pools.stop()
