from __future__ import annotations

import asyncio

import pytest

from vpq.metadata.acks import StoredAckState, encode_state
from vpq.metadata.lease_keeper import LeaseKeeper
from vpq.metadata.leases import Lease, group_resource, pp_resource
from vpq.metadata.store import MetadataStore


async def _wait_until_free(md: MetadataStore, resource: str, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while await md.leases.owner(resource) is not None:
            await asyncio.sleep(0.02)


async def test_acquire_renew_release(md: MetadataStore) -> None:
    r = pp_resource(3)
    assert r == "pp:3"
    t1 = await md.leases.acquire(r, "w1", 5000)
    assert t1 is not None
    assert await md.leases.acquire(r, "w2", 5000) is None
    assert await md.leases.owner(r) == Lease("w1", t1)
    assert await md.leases.renew(r, "w1", t1, 5000)
    assert not await md.leases.renew(r, "w2", t1, 5000)
    assert await md.leases.check_fence(r, t1)
    t2 = await md.leases.acquire(r, "w1", 5000)  # re-acquire: new, higher token
    assert t2 is not None and t2 > t1
    assert not await md.leases.check_fence(r, t1)
    assert not await md.leases.renew(r, "w1", t1, 5000)
    assert not await md.leases.release(r, "w1", t1)
    assert await md.leases.release(r, "w1", t2)
    assert await md.leases.owner(r) is None
    t3 = await md.leases.acquire(r, "w2", 5000)
    assert t3 is not None and t3 > t2
    owners = await md.leases.owners([r, pp_resource(4)])
    assert owners == {r: Lease("w2", t3), "pp:4": None}


async def test_expired_lease_hands_over_with_higher_token(make_store) -> None:
    old, new = make_store(), make_store()
    r = group_resource("orders", "billing")
    stale = await old.leases.acquire(r, "read-1", 200)
    assert stale is not None
    assert await new.leases.acquire(r, "read-2", 200) is None
    await _wait_until_free(new, r)  # read-1 stopped renewing: Redis expires the lease
    fresh = await new.leases.acquire(r, "read-2", 5000)
    assert fresh is not None and fresh > stale
    assert await new.leases.owner(r) == Lease("read-2", fresh)
    assert not await old.leases.renew(r, "read-1", stale, 200)
    assert not await old.leases.check_fence(r, stale)
    assert await old.leases.check_fence(r, fresh)
    # the stale owner's ack snapshot is rejected, the new owner's accepted
    assert not await old.acks.save("orders", "billing", stale, {0: encode_state(1, stale, StoredAckState(10))})
    assert await new.acks.save("orders", "billing", fresh, {0: encode_state(1, fresh, StoredAckState(5, (), (7,)))})
    assert await old.acks.load("orders", "billing", 1) == {0: StoredAckState(5, (), (7,))}


async def test_node_registry(md: MetadataStore) -> None:
    d = await md.nodes.register_node("w1", "write", "127.0.0.1:9001", 5000, {"pps": [0, 1]})
    await md.nodes.register_node("w2", "write", "127.0.0.1:9002", 150)
    await md.nodes.register_node("r1", "read", "127.0.0.1:9101", 5000)
    writes = await md.nodes.nodes("write")
    assert [n.node_id for n in writes] == ["w2", "w1"]
    assert writes[1].address == "127.0.0.1:9001" and writes[1].meta == {"pps": [0, 1]} and writes[1].deadline_ms == d
    async with asyncio.timeout(5):
        while len(await md.nodes.nodes("write")) != 1:
            await asyncio.sleep(0.02)
    assert not await md.nodes.renew_node("w2", "write", 5000)  # expired: must register again
    assert await md.nodes.renew_node("w1", "write", 5000)
    assert await md.nodes.deregister_node("w1", "write")
    assert await md.nodes.nodes("write") == []
    assert [n.node_id for n in await md.nodes.nodes("read")] == ["r1"]
    with pytest.raises(ValueError):
        await md.nodes.register_node("w:1 x", "write", "", 100)


async def test_keeper_keeps_leases_and_reports_loss(make_store) -> None:
    md, thief = make_store(), make_store()
    lost: asyncio.Queue[tuple[str, int]] = asyncio.Queue()

    async def on_lost(resource: str, token: int) -> None:
        await lost.put((resource, token))

    keeper = LeaseKeeper(md.leases, "read-1", 300, on_lost=on_lost, nodes=md.nodes, role="read", address="a:1")
    await keeper.start()
    try:
        r1, r2 = group_resource("q", "g1"), group_resource("q", "g2")
        t1 = await keeper.acquire(r1)
        t2 = await keeper.acquire(r2)
        assert t1 is not None and t2 is not None
        for _ in range(3):  # renewed well past the TTL
            await asyncio.sleep(0.3)
            assert await thief.leases.acquire(r1, "read-2", 300) is None
        assert [n.node_id for n in await md.nodes.nodes("read")] == ["read-1"]
        # someone breaks in: the lease key is deleted and taken over
        await thief.client.delete(thief.keys.lease(r2))
        stolen = await thief.leases.acquire(r2, "read-2", 5000)
        assert stolen is not None and stolen > t2
        async with asyncio.timeout(5):
            assert await lost.get() == (r2, t2)
        assert keeper.token(r2) is None and keeper.token(r1) == t1
    finally:
        await keeper.stop()
    assert await md.leases.owner(r1) is None  # released on stop
    assert await md.nodes.nodes("read") == []
    assert lost.empty()


async def test_keeper_reports_loss_when_redis_is_unreachable(redis_server, key_prefix: str) -> None:
    from vpq.config.settings import RedisSettings

    md = MetadataStore(RedisSettings(key_prefix=key_prefix), url=redis_server.url)
    lost: asyncio.Queue[tuple[str, int]] = asyncio.Queue()

    async def on_lost(resource: str, token: int) -> None:
        await lost.put((resource, token))

    keeper = LeaseKeeper(md.leases, "write-1", 300, on_lost=on_lost)
    await keeper.start()
    try:
        token = await keeper.acquire(pp_resource(0))
        assert token is not None
        redis_server.kill()
        async with asyncio.timeout(8):
            assert await lost.get() == (pp_resource(0), token)
        assert keeper.held() == {}
    finally:
        redis_server.start()
        await keeper.stop()
        await md.stop()
