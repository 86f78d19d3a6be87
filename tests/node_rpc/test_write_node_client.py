"""WriteNodeClient against a real write node (a live platform's, ``tests/live_platform.py``),
reached directly or through a recording proxy (``tests/recording_proxy.py``) where a test
must see what was sent, make the node slow, or rewrite its answer into what a healthy
node never says (a text error, a malformed success)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from tests.codec.format1 import build_batch
from tests.live_platform import LivePlatform, platform_settings, running
from tests.recording_proxy import RecordingProxy
from vpq.codec.columnar import build_columnar_batch, columns_of
from vpq.codec.records import Record, decode_batches
from vpq.common.errors import BadRequest, InternalError, Unavailable, VpqError
from vpq.gateway.cluster_backend import ClusterBackend
from vpq.node_rpc.append_frames import Frame
from vpq.node_rpc.call import NODE_UNREACHABLE, call_node
from vpq.node_rpc.write_node_client import WriteNodeClient


@dataclass
class Node:
    """The platform's write node ``w0`` (owner of pps 0 and 1) and a queue placed on both."""

    address: str
    queue_id: int
    vp_on: dict[int, int]  # pp -> a vp of the queue placed there


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivePlatform]:
    settings = platform_settings(tmp_path_factory.mktemp("write-client"), physical_partitions=2)
    with running(settings, gateway=False) as live:
        yield live


@pytest.fixture(scope="module")
def node(platform: LivePlatform) -> Node:
    async def create() -> dict:
        admin = ClusterBackend(platform.settings, platform.redis_url)
        await admin.start()
        try:
            info, _ = await admin.put_queue("client-test", {"virtual_partitions": 4})
            return info
        finally:
            await admin.stop()

    info = platform.run(create())
    vp_on = {pp: vp for vp, pp in reversed(list(enumerate(info["placement"])))}
    assert sorted(vp_on) == [0, 1], info["placement"]
    return Node(platform.writers[0].address, info["id"], vp_on)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
async def proxied(node: Node) -> AsyncIterator[tuple[RecordingProxy, str]]:
    proxy = RecordingProxy(f"http://{node.address}")
    server = TestServer(proxy.app(), host="127.0.0.1")
    await server.start_server()
    yield proxy, f"127.0.0.1:{server.port}"
    await server.close()


def records(node: Node, pp: int, *values: bytes, vp: int | None = None) -> list[Record]:
    v = node.vp_on[pp] if vp is None else vp
    return [Record(value=v_, queue_id=node.queue_id, virtual_partition=v) for v_ in values]


def batch(node: Node, pp: int, *values: bytes, ts: int = 1000, vp: int | None = None) -> bytes:
    """A magic-2 batch, as the produce path builds them."""
    return build_columnar_batch(0, ts, columns_of(records(node, pp, *values, vp=vp), ts))


def any_batch() -> bytes:
    """A well-formed batch for a server that never reads it."""
    return build_columnar_batch(0, 1000, columns_of([Record(value=b"a", queue_id=7, virtual_partition=1)], 1000))


async def append(client: WriteNodeClient, address: str, pp: int, data: bytes, map_epoch: int) -> tuple[int, int]:
    """One frame through ``append_many``: its offsets, or the node's error for it raised."""
    (answer,) = await client.append_many(address, [Frame(pp, data)], map_epoch)
    if isinstance(answer, VpqError):
        raise answer
    return answer


async def end_offset(client: WriteNodeClient, node: Node, pp: int) -> int:
    listing = await client.partitions(node.address)
    return {p["id"]: p["end_offset"] for p in listing["partitions"]}[pp]


async def test_append_stamps_offsets_and_sends_the_epoch(session, pools, node: Node, proxied) -> None:
    proxy, address = proxied
    client = WriteNodeClient(session, pools=pools)
    base0, base1 = await end_offset(client, node, 0), await end_offset(client, node, 1)
    assert await append(client, address, 0, batch(node, 0, b"a", b"b"), map_epoch=5) == (base0, base0 + 1)
    assert await append(client, address, 0, batch(node, 0, b"c"), map_epoch=6) == (base0 + 2, base0 + 2)
    assert await append(client, address, 1, batch(node, 1, b"x"), map_epoch=6) == (base1, base1)
    appends = proxy.requests_to("POST", "/append")
    assert [r.headers["X-Map-Epoch"] for r in appends[:2]] == ["5", "6"]
    res = await client.read(node.address, 0, offset=base0, max_bytes=1 << 20, wait_ms=0)
    records = [r for r in decode_batches(res.data) if r.offset >= base0]
    assert [(r.offset, r.value) for r in records] == [(base0, b"a"), (base0 + 1, b"b"), (base0 + 2, b"c")]


async def test_read_returns_whole_batches_and_offsets(session, pools, node: Node) -> None:
    client = WriteNodeClient(session, pools=pools)
    base = await end_offset(client, node, 0)
    await append(client, node.address, 0, batch(node, 0, b"a", b"b"), 1)
    await append(client, node.address, 0, batch(node, 0, b"c"), 1)
    res = await client.read(node.address, 0, offset=base + 1, max_bytes=1 << 20, wait_ms=0)
    assert (res.start_offset, res.end_offset) == (0, base + 3)
    got = [(r.offset, r.value) for r in decode_batches(res.data)]
    assert got[0] == (base, b"a") and got[-2:] == [(base + 1, b"b"), (base + 2, b"c")]  # whole batches
    res = await client.read(node.address, 0, offset=base + 2, max_bytes=1, wait_ms=0)
    assert [r.value for r in decode_batches(res.data)] == [b"c"]  # at least one batch


async def test_read_long_polls_at_the_end(session, pools, node: Node) -> None:
    client = WriteNodeClient(session, pools=pools)
    end = await end_offset(client, node, 1)
    empty = await client.read(node.address, 1, offset=end, max_bytes=1024, wait_ms=20)
    assert empty.data == b"" and empty.end_offset == end
    reader = asyncio.create_task(client.read(node.address, 1, offset=end, max_bytes=1024, wait_ms=10_000))
    await asyncio.sleep(0.05)
    await append(client, node.address, 1, batch(node, 1, b"late"), 1)
    got = await reader
    assert [r.value for r in decode_batches(got.data)] == [b"late"]


async def test_partitions_listing(session, pools, node: Node) -> None:
    client = WriteNodeClient(session, pools=pools)
    before = await end_offset(client, node, 1)
    await append(client, node.address, 1, batch(node, 1, b"a"), 1)
    listing = await client.partitions(node.address)
    assert listing["node_id"] == "w0"
    assert [p["id"] for p in listing["partitions"]] == [0, 1]
    assert listing["partitions"][1]["end_offset"] == before + 1


async def test_node_errors_come_back_as_the_same_exception(session, pools, node: Node) -> None:
    client = WriteNodeClient(session, pools=pools)
    before = await end_offset(client, node, 0)
    with pytest.raises(Unavailable) as info:
        await append(client, node.address, 0, batch(node, 0, b"a", vp=node.vp_on[1]), 1)  # that vp is on pp 1
    assert info.value.code == "stale_map"
    assert info.value.details["epoch"] >= 1
    assert info.value.retry_after == 0.0 and info.value.retryable  # the node asks for an immediate retry (after a map reload)
    with pytest.raises(Unavailable) as info:
        await append(client, node.address, 5, batch(node, 0, b"a"), 1)  # not owned
    assert info.value.code == "not_owner"
    with pytest.raises(BadRequest) as bad:
        await append(client, node.address, 0, b"\x00" * 60, 1)
    assert bad.value.code == "corrupt_batch"
    corrupted = bytearray(batch(node, 0, b"abc"))
    corrupted[-1] ^= 0xFF
    with pytest.raises(BadRequest):
        await append(client, node.address, 0, bytes(corrupted), 1)
    with pytest.raises(BadRequest) as bad:  # magic 1 (rows): the platform writes magic 2 only
        await append(client, node.address, 0, build_batch(0, records(node, 0, b"a"), 1000), 1)
    assert bad.value.code == "corrupt_batch" and "magic 1" in bad.value.message
    assert await end_offset(client, node, 0) == before  # nothing was stored by any refused append


async def test_a_refused_frame_does_not_stop_the_others(session, pools, node: Node) -> None:
    client = WriteNodeClient(session, pools=pools)
    base0, base1 = await end_offset(client, node, 0), await end_offset(client, node, 1)
    answers = await client.append_many(
        node.address,
        [Frame(0, batch(node, 0, b"a")), Frame(1, batch(node, 0, b"b")), Frame(1, batch(node, 1, b"c"))],
        1,
    )
    assert answers[0] == (base0, base0) and answers[2] == (base1, base1)
    assert isinstance(answers[1], Unavailable) and answers[1].code == "stale_map"  # vp of pp 0 sent to pp 1


async def test_error_without_json_body_names_the_node(session, proxied) -> None:
    """The real node's answer, made a 502 with a text body by the proxy."""
    proxy, address = proxied
    proxy.rewrite(r"/partitions$", lambda status, headers, body: (502, {"Content-Type": "text/plain"}, b"bad gateway"))
    with pytest.raises(VpqError) as info:
        await call_node(session, "GET", address, "/internal/v1/partitions", role="write", timeout_s=5)
    assert info.value.status == 502
    assert info.value.code == "http_502"
    assert address in info.value.message


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_connection_refused_is_unavailable_naming_the_node(session, pools) -> None:
    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(Unavailable) as info:
        await append(WriteNodeClient(session, pools=pools), address, 0, any_batch(), 1)
    err = info.value
    assert err.code == NODE_UNREACHABLE and err.retryable
    assert address in err.message and err.details["node"] == address and err.details["role"] == "write"
    assert err.headers()["Retry-After"] == "1"


async def test_timeout_is_unavailable(session, pools, node: Node, proxied) -> None:
    proxy, address = proxied
    proxy.delay(r"/append$", 2.0)
    client = WriteNodeClient(session, pools=pools, append_timeout_s=0.1)
    with pytest.raises(Unavailable) as info:
        await append(client, address, 0, batch(node, 0, b"a"), 1)
    assert info.value.code == NODE_UNREACHABLE


async def test_malformed_success_answer_is_internal_error(session, pools, node: Node, proxied) -> None:
    """The real node's answer to a multi-append, its offset made a string by the proxy."""
    proxy, address = proxied
    proxy.rewrite(r"/internal/v1/append$", lambda status, headers, body: (200, headers, b'{"results": [{"base_offset": "zero"}]}'))
    now = int(time.time() * 1000)
    records = [Record(value=b"x", queue_id=node.queue_id, virtual_partition=node.vp_on[0])]
    frame = Frame(0, build_columnar_batch(0, now, columns_of(records, now)))
    with pytest.raises(InternalError) as info:
        await WriteNodeClient(session, pools=pools).append_many(address, [frame], 1)
    assert info.value.code == "bad_node_answer"


@pytest.mark.parametrize(
    "entry",
    [
        b'{"offsets": [1, 2], "vps": [0]}',
        b'{"offsets": [1, -2], "vps": [0, 0]}',
        b'{"offsets": "x", "vps": []}',
        b'{"offsets": [1], "vps": [true]}',
    ],
)
async def test_malformed_deduplicated_answer_is_internal_error(session, pools, node: Node, proxied, entry: bytes) -> None:
    proxy, address = proxied
    proxy.rewrite(r"/internal/v1/append$", lambda status, headers, body: (200, headers, b'{"results": [' + entry + b"]}"))
    now = int(time.time() * 1000)
    records = [Record(value=b"x", queue_id=node.queue_id, virtual_partition=node.vp_on[0])]
    frame = Frame(0, build_columnar_batch(0, now, columns_of(records, now)))
    with pytest.raises(InternalError) as info:
        await WriteNodeClient(session, pools=pools).append_many(address, [frame], 1)
    assert info.value.code == "bad_node_answer"
