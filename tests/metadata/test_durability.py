"""Changes that must not be lost wait for a replica (metadata.durability): a real
master with a real replica; the replica paused with SIGSTOP for the timeout case."""

from __future__ import annotations

import asyncio
import signal

import pytest
import redis

from tests.needs import missing
from vpq.common.redis_server import RedisServer, find_redis_server
from vpq.config.settings import RedisSettings
from vpq.metadata.connection import ClientOptions
from vpq.metadata.durability import ReplicaNotAcknowledged, ReplicaWaiter, online_replicas
from vpq.metadata.store import MetadataStore

ENTRY = {"virtual_partitions": 2, "placement": [0, 1]}


def test_online_replicas_counts_only_online_ones() -> None:
    info = {
        "role": "master", "connected_slaves": 2,
        "slave0": {"ip": "a", "port": 1, "state": "online"},
        "slave1": {"ip": "b", "port": 2, "state": "wait_bgsave"},
    }
    assert online_replicas(info) == 1
    assert online_replicas({"role": "master", "connected_slaves": 0}) == 0
    assert online_replicas({"role": "slave"}) == 0


def test_replica_count_is_cached_for_check_s() -> None:
    now = [100.0]
    waiter = ReplicaWaiter(500, 5.0, clock=lambda: now[0])
    assert waiter.cached() is None
    waiter.remember(1)
    now[0] += 4.9
    assert waiter.cached() == 1
    now[0] += 0.2
    assert waiter.cached() is None
    waiter.remember(0)
    waiter.forget()
    assert waiter.cached() is None


@pytest.fixture
def master_and_replica(tmp_path):
    if find_redis_server() is None:
        missing("needs the redis-server binary")
    master = RedisServer(
        tmp_path / "master", appendonly=True, appendfsync="always", extra_args=("--repl-diskless-sync-delay", "0")
    )
    master.start()
    replica = RedisServer(tmp_path / "replica", appendonly=False, extra_args=("--replicaof", "127.0.0.1", str(master.port)))
    try:
        replica.start()
        yield master, replica
    finally:
        if replica.proc is not None and replica.proc.poll() is None:
            replica.proc.send_signal(signal.SIGCONT)
        replica.stop()
        master.stop()


async def _until_replica_online(url: str) -> None:
    """Until the replica is online and acknowledges a write (it may still be loading
    the initial copy for a moment after the master lists it online)."""
    with redis.Redis.from_url(url, decode_responses=True) as r:
        for _ in range(200):
            r.set("probe", 1)
            if online_replicas(r.info("replication")) == 1 and r.wait(1, 100) == 1:
                return
            await asyncio.sleep(0.05)
    raise AssertionError("the replica never came online")


def _replica_epoch(replica: RedisServer, prefix: str) -> int:
    with redis.Redis.from_url(replica.url, decode_responses=True) as r:
        return int(r.hget(f"{prefix}:map", "epoch") or 0)


async def test_map_publish_election_and_lease_grant_wait_for_the_replica(master_and_replica) -> None:
    master, replica = master_and_replica
    await _until_replica_online(master.url)
    md = MetadataStore(RedisSettings(key_prefix="dur"), url=master.url, options=ClientOptions(replica_wait_ms=300))
    try:
        assert await md.maps.publish_changes({"q": ENTRY}, 0)
        waiter = md.client.replica_waiter
        assert waiter is not None and (waiter.waits, waiter.timeouts) == (1, 0)
        # WAIT returned: the replica has the epoch the moment publish returns
        assert _replica_epoch(replica, "dur") == 1
        rec = await md.leaders.create(7, [0, 1])
        assert (await md.leaders.elect(7, 0, "w0", rec.epoch)).epoch == 1
        token = await md.leases.acquire("pp:7", "w0", 5000)
        assert token is not None and await md.leases.renew("pp:7", "w0", token, 5000)
        assert waiter.waits == 4  # create, elect, acquire; not the renewal

        # a paused replica acknowledges nothing: the change is made on the master but
        # the call fails (retryable), and a retry after the replica is back succeeds
        replica.proc.send_signal(signal.SIGSTOP)
        with pytest.raises(ReplicaNotAcknowledged):
            await md.maps.publish_changes({"q": ENTRY, "r": ENTRY}, 1)
        assert waiter.timeouts == 1
        assert await md.maps.epoch() == 2
        replica.proc.send_signal(signal.SIGCONT)
        assert await md.maps.publish_changes({"q": ENTRY, "r": ENTRY}, 1)
        assert _replica_epoch(replica, "dur") == 2
        assert waiter.timeouts == 1

        # the replica goes away while its count is cached: the WAIT times out, the
        # count is read again (0) and the publish succeeds, as with no replica at all
        replica.stop()
        assert await md.maps.publish_changes({"q": ENTRY}, 2)
        assert waiter.timeouts == 1
    finally:
        await md.stop()


async def test_without_a_replica_nothing_waits(redis_url: str) -> None:
    md = MetadataStore(RedisSettings(key_prefix="dur1"), url=redis_url)
    try:
        assert await md.maps.publish_changes({"q": ENTRY}, 0)
        rec = await md.leaders.create(1, [0])
        assert await md.leaders.elect(1, 0, "w0", rec.epoch) is not None
        assert md.client.replica_waiter.waits == 0
    finally:
        await md.stop()
