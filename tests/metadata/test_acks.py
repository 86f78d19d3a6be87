"""metadata/acks.py: the stored ack-state format (3, and 2 and 1 still read) and the store,
fenced by the group lease, on a real redis-server."""

from __future__ import annotations

import pytest

from vpq.common.redis_server import RedisServer
from vpq.config.settings import RedisSettings
from vpq.metadata.acks import StoredAckState, decode_state, encode_state
from vpq.metadata.leases import group_resource
from vpq.metadata.store import MetadataStore

S = StoredAckState


def test_encoding_round_trip() -> None:
    for state in (
        S(0),
        S(100, (3, 7, 99), (100, 105)),
        S(2**40, (2**40 - 5,), ()),
        S(100, (3, 7), (104,), ((5, 10, 50), (9, 60, None))),
        S(100, (3, 7), (), (), (2, 1_795_000_000_000, 40)),
    ):
        assert decode_state(encode_state(7, 42, state)) == (7, 42, state)
    with pytest.raises(ValueError):
        decode_state("2|1|1|0||")
    with pytest.raises(ValueError):
        decode_state("garbage")
    with pytest.raises(ValueError):
        decode_state("2|1|1|x|||")


def test_format_2_is_still_read() -> None:
    """Format 2: no delayed part."""
    assert decode_state("2|7|2|100|3:0,4|4|5:10:") == (7, 2, S(100, (3, 7), (104,), ((5, 10, None),)))
    assert encode_state(7, 2, S(100, (3, 7), (104,), ((5, 10, None),))) == "3|7|2|100|3:0,4|4|5:10:|"


def test_format_1_is_still_read() -> None:
    """Format 1: per pp, no parked part."""
    assert decode_state("1|7|2|100|3:0,4|4") == (7, 2, S(100, (3, 7), (104,)))
    assert decode_state("1|7|2|10|4:0|") == (7, 2, S(10, (4,), ()))


async def test_ack_store_is_fenced_by_the_group_lease(md: MetadataStore) -> None:
    store = md.acks
    state = S(10, (4,), ())
    blob = encode_state(5, 1, state)
    assert not await store.save("q", "g", 1, {0: blob})  # no lease at all
    token = await md.leases.acquire(group_resource("q", "g"), "r1", 10_000)
    assert token is not None
    assert not await store.save("q", "g", token + 1, {0: blob})
    assert await store.save("q", "g", token, {0: blob, 3: encode_state(5, token, S(7))})
    assert await store.load("q", "g", 5) == {0: state, 3: S(7)}
    assert await store.load("q", "g", 6) == {}  # written for another incarnation of the queue
    await md.leases.release(group_resource("q", "g"), "r1", token)
    token2 = await md.leases.acquire(group_resource("q", "g"), "r2", 10_000)
    assert not await store.save("q", "g", token, {0: encode_state(5, token, S(99))})
    assert await store.load("q", "g", 5) == {0: state, 3: S(7)}
    assert token2 is not None and token2 > token
    assert await md.client.exists(md.keys.acks("q", "g")) == 1


async def test_ack_state_survives_a_redis_crash_with_aof(redis_server: RedisServer, key_prefix: str) -> None:
    md = MetadataStore(RedisSettings(key_prefix=key_prefix), url=redis_server.url)
    try:
        token = await md.leases.acquire(group_resource("orders", "billing"), "read-1", 60000)
        assert token is not None
        blobs = {pp: encode_state(3, token, S(1000 + pp, (990,), (1005 + pp,))) for pp in range(3)}
        assert await md.acks.save("orders", "billing", token, blobs)
        before = await md.acks.load("orders", "billing", 3)

        redis_server.kill()  # SIGKILL: no shutdown save, only the fsynced AOF
        redis_server.start()

        after = await md.acks.load("orders", "billing", 3)  # the client reconnects by itself
        assert after == before and after[2] == S(1002, (990,), (1007,))
        # the lease survived too: the holder still writes, nobody else does
        assert await md.acks.save("orders", "billing", token, {0: encode_state(3, token, S(2000))})
        assert not await md.acks.save("orders", "billing", token - 1, {0: encode_state(3, token, S(2001))})
        assert (await md.acks.load("orders", "billing", 3))[0] == S(2000)
    finally:
        await md.stop()
