from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.common.redis_server import RedisServer
from vpq.config.settings import RedisSettings
from vpq.metadata.acks import AckStore, SaveStatus, decode_state, encode_state
from vpq.metadata.errors import AckStateTooLargeError
from vpq.metadata.leases import group_resource
from vpq.metadata.store import MetadataStore


@given(st.integers(0, 2**53), st.lists(st.integers(0, 2**53), max_size=50), st.integers(1, 2**40))
@settings(max_examples=100, deadline=None)
def test_encoding_round_trip(lw: int, above: list[int], token: int) -> None:
    blob, norm = encode_state(lw, above, token, 10_000)
    state = decode_state(blob)
    assert state.low_watermark == lw
    assert state.acked_above == norm == sorted({o for o in above if o >= lw})
    assert state.fence_token == token
    for o in above:
        assert state.is_acked(o)


async def test_watermark_never_goes_backwards_and_size_is_bounded(md: MetadataStore) -> None:
    r = group_resource("q", "g")
    token = await md.leases.acquire(r, "read-1", 10000)
    assert token is not None
    assert await md.acks.load("q", "g", 0) is None
    assert await md.acks.save("q", "g", 0, 100, [105, 103, 90], token)
    assert await md.acks.save_status("q", "g", 0, 99, [], token) is SaveStatus.REGRESSED
    assert await md.acks.save_status("q", "g", 0, 100, [103, 105, 107], token) is SaveStatus.SAVED
    assert await md.acks.save_status("q", "g", 0, 200, [], token + 1) is SaveStatus.FENCED
    state = await md.acks.load("q", "g", 0)
    assert state is not None and state.low_watermark == 100 and state.acked_above == [103, 105, 107]
    small = AckStore(md.client, md.keys, max_acked_above=3)
    with pytest.raises(AckStateTooLargeError):
        await small.save("q", "g", 0, 100, [101, 102, 103, 104], token)
    assert (await md.acks.load("q", "g", 0)).acked_above == [103, 105, 107]  # refused: unchanged
    assert await small.save("q", "g", 0, 103, [102, 104, 105, 106], token)  # 3 left above the new lw
    assert (await md.acks.load("q", "g", 0)).acked_above == [104, 105, 106]


async def test_ack_state_survives_a_redis_crash_with_aof(redis_server: RedisServer, key_prefix: str) -> None:
    settings = RedisSettings(key_prefix=key_prefix)
    md = MetadataStore(settings, url=redis_server.url)
    try:
        r = group_resource("orders", "billing")
        token = await md.leases.acquire(r, "read-1", 60000)
        assert token is not None
        for pp in range(3):
            assert await md.acks.save("orders", "billing", pp, 1000 + pp, [1005 + pp, 1010 + pp], token)
        assert await md.acks.save("orders", "billing", 0, 2000, [2002], token)
        before = await md.acks.load_all("orders", "billing")

        redis_server.kill()  # SIGKILL: no shutdown save, only the fsynced AOF
        redis_server.start()

        after = await md.acks.load_all("orders", "billing")  # the client reconnects by itself
        assert after == before
        assert after[0].low_watermark == 2000 and after[0].acked_above == [2002]
        assert after[2].low_watermark == 1002 and after[2].acked_above == [1007, 1012]
        # the lease survived too, and the watermark still cannot go backwards
        assert await md.acks.save_status("orders", "billing", 0, 1500, [], token) is SaveStatus.REGRESSED
        assert await md.acks.save("orders", "billing", 0, 2003, [], token)
        assert (await md.acks.load("orders", "billing", 0)).low_watermark == 2003
    finally:
        await md.stop()
