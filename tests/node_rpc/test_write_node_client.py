"""WriteNodeClient against a fake write node that speaks the wire format honestly."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.gateway.cluster_fakes import FakeWriteNode
from vpq.codec.records import Record, build_batch, decode_batches
from vpq.common.errors import BadRequest, InternalError, Unavailable, VpqError
from vpq.node_rpc.call import NODE_UNREACHABLE, call_node
from vpq.node_rpc.write_node_client import WriteNodeClient


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
async def node() -> AsyncIterator[FakeWriteNode]:
    n = FakeWriteNode(owned={0, 1}, epoch=3)
    await n.start()
    yield n
    await n.stop()


def batch(*values: bytes, ts: int = 1000) -> bytes:
    return build_batch(0, [Record(value=v, queue_id=7, virtual_partition=1) for v in values], ts)


async def test_append_stamps_offsets_and_sends_the_epoch(session, node) -> None:
    client = WriteNodeClient(session)
    assert await client.append(node.address, 0, batch(b"a", b"b"), map_epoch=5) == (0, 1)
    assert await client.append(node.address, 0, batch(b"c"), map_epoch=6) == (2, 2)
    assert await client.append(node.address, 1, batch(b"x"), map_epoch=6) == (0, 0)
    assert [b.epoch for b in node.batches[0]] == [5, 6]
    assert [(r.offset, r.value) for r in node.records(0)] == [(0, b"a"), (1, b"b"), (2, b"c")]


async def test_read_returns_whole_batches_and_offsets(session, node) -> None:
    client = WriteNodeClient(session)
    await client.append(node.address, 0, batch(b"a", b"b"), 1)
    await client.append(node.address, 0, batch(b"c"), 1)
    res = await client.read(node.address, 0, offset=1, max_bytes=1 << 20, wait_ms=0)
    assert (res.start_offset, res.end_offset) == (0, 3)
    assert [(r.offset, r.value) for r in decode_batches(res.data)] == [(0, b"a"), (1, b"b"), (2, b"c")]
    res = await client.read(node.address, 0, offset=2, max_bytes=1, wait_ms=0)
    assert [r.value for r in decode_batches(res.data)] == [b"c"]  # at least one batch


async def test_read_long_polls_at_the_end(session, node) -> None:
    client = WriteNodeClient(session)
    empty = await client.read(node.address, 1, offset=0, max_bytes=1024, wait_ms=20)
    assert empty.data == b"" and empty.end_offset == 0
    reader = asyncio.create_task(client.read(node.address, 1, offset=0, max_bytes=1024, wait_ms=10_000))
    await asyncio.sleep(0.05)
    await client.append(node.address, 1, batch(b"late"), 1)
    got = await reader
    assert [r.value for r in decode_batches(got.data)] == [b"late"]


async def test_partitions_listing(session, node) -> None:
    client = WriteNodeClient(session)
    await client.append(node.address, 1, batch(b"a"), 1)
    listing = await client.partitions(node.address)
    assert listing["node_id"] == "w1"
    assert [(p["id"], p["end_offset"]) for p in listing["partitions"]] == [(0, 0), (1, 1)]


async def test_node_errors_come_back_as_the_same_exception(session, node) -> None:
    client = WriteNodeClient(session)
    node.fail[0] = [Unavailable("stale_map", "vp 3 moved", epoch=9, retry_after=0.5)]
    with pytest.raises(Unavailable) as info:
        await client.append(node.address, 0, batch(b"a"), 1)
    assert info.value.code == "stale_map"
    assert info.value.details["epoch"] == 9
    assert info.value.retry_after == 0.5
    with pytest.raises(Unavailable) as info:
        await client.append(node.address, 5, batch(b"a"), 1)  # not owned
    assert info.value.code == "not_owner"
    with pytest.raises(BadRequest) as bad:
        await client.append(node.address, 0, b"\x00" * 60, 1)
    assert bad.value.code == "corrupt_batch"
    corrupted = bytearray(batch(b"abc"))
    corrupted[-1] ^= 0xFF
    with pytest.raises(BadRequest):
        await client.append(node.address, 0, bytes(corrupted), 1)
    assert node.end_offset(0) == 0  # nothing was stored by any refused append


async def test_error_without_json_body_names_the_node(session, node) -> None:
    with pytest.raises(VpqError) as info:
        await call_node(session, "GET", node.address, "/text-error", role="write", timeout_s=5)
    assert info.value.status == 502
    assert info.value.code == "http_502"
    assert node.address in info.value.message


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_connection_refused_is_unavailable_naming_the_node(session) -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(Unavailable) as info:
        await WriteNodeClient(session).append(address, 0, batch(b"a"), 1)
    err = info.value
    assert err.code == NODE_UNREACHABLE and err.retryable
    assert address in err.message and err.details["node"] == address and err.details["role"] == "write"
    assert err.headers()["Retry-After"] == "1"


async def test_timeout_is_unavailable(session, node) -> None:
    node.append_delay_s = 2.0
    client = WriteNodeClient(session, append_timeout_s=0.1)
    with pytest.raises(Unavailable) as info:
        await client.append(node.address, 0, batch(b"a"), 1)
    assert info.value.code == NODE_UNREACHABLE


async def test_malformed_success_answer_is_internal_error(session) -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"base_offset": "zero"})

    app = web.Application()
    app.router.add_post("/internal/v1/partitions/{pp}/append", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        with pytest.raises(InternalError) as info:
            await WriteNodeClient(session).append(f"127.0.0.1:{server.port}", 0, batch(b"a"), 1)
        assert info.value.code == "bad_node_answer"
    finally:
        await server.close()
