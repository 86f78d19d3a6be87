"""The multi-partition append (``POST /internal/v1/append``): the frame codec, and a real
write node answering per frame, stopping a partition at its first refused frame."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.write_nodes.test_service_helpers import batch, read
from vpq.codec.records import decode_batches
from vpq.common.errors import BadRequest, Unavailable
from vpq.node_rpc.append_frames import (
    MAX_EPOCH,
    MAX_PARTITION,
    ChainGate,
    Frame,
    FrameError,
    decode_frames,
    encode_frames,
    frame_buffers,
)
from vpq.node_rpc.write_node_client import WriteNodeClient

# ---------------------------------------------------------------- codec (pure)


@given(
    st.lists(
        st.builds(
            Frame, st.integers(0, MAX_PARTITION), st.binary(min_size=1, max_size=64), st.booleans(),
            st.integers(-1, MAX_EPOCH),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_frames_round_trip(frames: list[Frame]) -> None:
    assert decode_frames(encode_frames(frames)) == frames
    buffers = frame_buffers(frames)
    assert b"".join(buffers) == encode_frames(frames)
    assert [b for b in buffers if any(b is f.batch for f in frames)] == [f.batch for f in frames]  # not copied


def test_a_frame_carries_its_leader_epoch_only_when_it_has_one() -> None:
    plain, fenced = encode_frames([Frame(3, b"abc")]), encode_frames([Frame(3, b"abc", False, 7)])
    assert len(fenced) == len(plain) + 4
    assert decode_frames(fenced) == [Frame(3, b"abc", False, 7)]
    with pytest.raises(ValueError):
        encode_frames([Frame(3, b"abc", False, -2)])


def test_a_chain_stops_at_its_first_refusal_and_new_chains_start_clean() -> None:
    gate = ChainGate()
    first, more, other, fresh = Frame(1, b"a"), Frame(1, b"b", True), Frame(2, b"c"), Frame(1, b"d")
    assert gate.refused(first) is None
    gate.record(first, "stale")
    assert gate.refused(more) == "stale"  # continues the refused chain
    assert gate.refused(other) is None  # another partition
    assert gate.refused(fresh) is None  # a new chain of the same partition (another producer)
    gate.record(fresh, None)
    assert gate.refused(Frame(1, b"e", True)) is None


@pytest.mark.parametrize(
    "body",
    [
        b"", b"\x00\x00\x00", encode_frames([Frame(1, b"abc")])[:-1], b"\x00\x00\x00\x01\x00\x00\x00\x00",
        encode_frames([Frame(1, b"abc", False, 7)])[:10],
    ],
    ids=["empty", "short-header", "truncated-batch", "empty-frame", "truncated-epoch"],
)
def test_malformed_bodies_are_refused(body: bytes) -> None:
    with pytest.raises(FrameError):
        decode_frames(body)


# ---------------------------------------------------------------- a real node


async def test_frames_of_several_partitions_are_appended_in_one_request(node) -> None:
    service, _md, qid, http = node
    client = WriteNodeClient(http)
    items = [Frame(0, batch(qid, [0, 3], "a")), Frame(2, batch(qid, [2], "b")), Frame(0, batch(qid, [3], "c"))]
    assert await client.append_many(service.address, items, 1) == [(0, 1), (0, 0), (2, 2)]
    _, data, headers = await read(http, service.address, 0, 0)
    assert headers["X-End-Offset"] == "3"
    assert [r.value for r in decode_batches(data)] == [b"a-0", b"a-1", b"c-0"]
    _, data, _ = await read(http, service.address, 2, 0)
    assert [r.value for r in decode_batches(data)] == [b"b-0"]


async def test_a_refused_frame_stops_its_chain_only(node) -> None:
    service, _md, qid, http = node
    client = WriteNodeClient(http)
    items = [
        Frame(0, batch(qid, [0, 1], "stale")),  # vp 1 lives on pp 1: stale_map
        Frame(2, batch(qid, [2], "ok")),
        Frame(0, batch(qid, [0], "after"), True),  # continues the refused chain: not appended
        Frame(1, batch(qid, [1], "elsewhere")),  # pp 1 is not held here
        Frame(0, batch(qid, [0], "other")),  # another producer's chain of pp 0: appended
    ]
    answers = await client.append_many(service.address, items, 1)
    assert isinstance(answers[0], Unavailable) and answers[0].code == "stale_map"
    assert answers[1] == (0, 0)
    assert isinstance(answers[2], Unavailable) and answers[2].code == "stale_map"
    assert isinstance(answers[3], Unavailable) and answers[3].code == "not_owner"
    assert answers[4] == (0, 0)
    _, data, headers = await read(http, service.address, 0, 0)
    assert [r.value for r in decode_batches(data)] == [b"other-0"]  # the refused chain left nothing


async def test_a_corrupt_frame_is_refused_and_changes_nothing_of_its_partition(node) -> None:
    service, _md, qid, http = node
    client = WriteNodeClient(http)
    bad = bytearray(batch(qid, [2]))
    bad[-1] ^= 0xFF
    answers = await client.append_many(service.address, [Frame(2, bytes(bad)), Frame(0, batch(qid, [0]))], 1)
    assert isinstance(answers[0], BadRequest) and answers[0].code == "corrupt_batch"
    assert answers[1] == (0, 0)
    _, data, _ = await read(http, service.address, 2, 0)
    assert data == b""


async def test_a_malformed_body_is_a_400_for_the_whole_request(node) -> None:
    service, _md, qid, http = node
    body = encode_frames([Frame(0, batch(qid, [0]))])[:-2]
    async with http.post(f"http://{service.address}/internal/v1/append", data=body) as resp:
        assert resp.status == 400
        assert orjson.loads(await resp.read())["error"]["code"] == "corrupt_batch"
    _, data, _ = await read(http, service.address, 0, 0)
    assert data == b""
