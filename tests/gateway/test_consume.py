"""Consumer endpoints on the real gateway over the real cluster backend: join, poll, ack,
nack, leave, group info."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.gateway.conftest import RecordingBackend, error_of
from vpq.gateway.backend import JoinSpec
from vpq.gateway.responses import AckResponse, GroupInfo, JoinResponse, NackResponse, PollResponse
from vpq.isolation.context import IsolationContext


@pytest.fixture
def q() -> str:
    """A queue name of the test's own: read nodes keep serving a deleted queue's groups for
    a while (and grow the queue when members outnumber its vps), so names are not reused."""
    return f"orders-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def G(q: str) -> str:  # the group path, named as the tests spell it
    return f"/v1/queues/{q}/groups/g"


@pytest.fixture
async def consumer(client: TestClient, backend: RecordingBackend, q: str, G: str) -> str:
    # one vp: the five messages are one partition's run, delivered in order
    r = await client.put(f"/v1/queues/{q}", json={"virtual_partitions": 1})
    assert r.status == 201, await r.text()
    msgs = [{"key": f"k{i}", "value": i} for i in range(5)]
    assert (await client.post(f"/v1/queues/{q}/messages", json={"messages": msgs})).status == 200
    r = await client.post(G + "/consumers", json={"consumer_id": "c1"})
    assert r.status == 200
    body = JoinResponse.model_validate(await r.json())
    assert body.consumer_id == "c1" and body.session_timeout_ms > 0
    backend.calls.clear()
    return "c1"


def calls(backend: RecordingBackend, name: str) -> list[Any]:
    return [args for n, args in backend.calls if n == name]


async def test_poll_ack_nack_cycle(client: TestClient, backend: RecordingBackend, consumer: str, G: str, q: str) -> None:
    r = await client.post(f"{G}/consumers/{consumer}/poll", json={"max_messages": 3, "wait_ms": 5000})
    assert r.status == 200
    got = PollResponse.model_validate(await r.json()).messages
    assert [m.value for m in got] == [0, 1, 2]
    assert all(m.delivery_count == 1 and m.queue == q for m in got)
    ids = [m.id for m in got]
    r = await client.post(f"{G}/consumers/{consumer}/ack", json={"ids": ids[:2] + ["9-999999"]})
    assert AckResponse.model_validate(await r.json()).acked == 2
    r = await client.post(f"{G}/consumers/{consumer}/nack", json={"ids": ids[2:], "delay_ms": 0})
    assert NackResponse.model_validate(await r.json()).nacked == 1
    assert calls(backend, "nack") == [(q, "g", "c1", ids[2:], 0)]
    r = await client.post(f"{G}/consumers/{consumer}/poll", json={"wait_ms": 5000})
    got = PollResponse.model_validate(await r.json()).messages
    assert [(m.value, m.delivery_count) for m in got] == [(2, 2), (3, 1), (4, 1)]


async def test_poll_acks_its_ack_ids_before_it_delivers(
    client: TestClient, backend: RecordingBackend, consumer: str, G: str, q: str
) -> None:
    # one vp, keys k0..k4: a poll of 2 takes k0 and k1; the next one acks them first
    r = await client.post(f"{G}/consumers/{consumer}/poll", json={"max_messages": 2, "wait_ms": 5000})
    first = PollResponse.model_validate(await r.json()).messages
    ids = [m.id for m in first]
    r = await client.post(f"{G}/consumers/{consumer}/poll", json={"max_messages": 5, "wait_ms": 5000, "ack": ids})
    assert r.status == 200
    assert [m.value for m in PollResponse.model_validate(await r.json()).messages] == [2, 3, 4]
    assert calls(backend, "poll")[1] == (q, "g", "c1", 5, 5000, ids)
    # acked: neither redelivered after a leave, nor acked again
    r = await client.post(f"{G}/consumers/{consumer}/ack", json={"ids": ids})
    assert AckResponse.model_validate(await r.json()).acked == 0
    text = await (await client.get("/metrics")).text()
    assert f'vpq_gateway_acked_messages_total{{group="g",queue="{q}"}} 2.0' in text
    assert (await client.delete(f"{G}/consumers/{consumer}")).status == 204
    r = await client.post(G + "/consumers", json={"consumer_id": "c2"})
    r = await client.post(f"{G}/consumers/c2/poll", json={"max_messages": 10, "wait_ms": 5000})
    assert sorted(m.value for m in PollResponse.model_validate(await r.json()).messages) == [2, 3, 4]


async def test_poll_without_body_uses_defaults(
    client: TestClient, backend: RecordingBackend, consumer: str, G: str, q: str
) -> None:
    assert (await client.post(f"{G}/consumers/{consumer}/poll")).status == 200
    assert calls(backend, "poll") == [(q, "g", "c1", 100, 0)]


async def test_long_poll_is_passed_through(client: TestClient, backend: RecordingBackend, consumer: str, G: str, q: str) -> None:
    r = await client.post(f"{G}/consumers/{consumer}/poll", json={"max_messages": 1000, "wait_ms": 20})
    assert r.status == 200
    assert calls(backend, "poll") == [(q, "g", "c1", 1000, 20)]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max_messages": 0}, "max_messages"),
        ({"max_messages": 1001}, "max_messages"),
        ({"max_messages": "10"}, "max_messages"),
        ({"wait_ms": 30001}, "wait_ms"),
        ({"wait_ms": -1}, "wait_ms"),
        ({"timeout": 5}, "timeout"),
        ({"ack": "0-1"}, "ack"),
        ({"ack": ["0-1", "a"]}, "ack[1]"),
        ({"ack": ["0-1", "1-2,3-4"]}, "ack[1]"),
        ({"ack": 5}, "ack"),
        ({"ack": ["0-1"] * 10_001}, "ack"),  # valid ids, too many
        ({"ack": ["0-1", "0-2"], "max_messages": 0}, "max_messages"),  # valid ids, another field wrong
        ({"ack": ["0-1"], "extra": 1}, "extra"),
    ],
)
async def test_bad_poll(client: TestClient, backend: RecordingBackend, consumer: str, body: dict, field: str, G: str) -> None:
    err = await error_of(await client.post(f"{G}/consumers/{consumer}/poll", json=body), 400, "invalid_request")
    assert err["field"] == field
    assert backend.calls == []


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("ack", {}, "ids"),
        ("ack", {"ids": "a"}, "ids"),
        ("ack", {"ids": ["0-1", ""]}, "ids[1]"),
        ("nack", {"ids": ["x" * 257]}, "ids[0]"),
        ("ack", {"ids": ["0-1", "a"]}, "ids[1]"),
        ("ack", {"ids": ["01-1"]}, "ids[0]"),
        ("nack", {"ids": ["4294967296-0"]}, "ids[0]"),
        ("nack", {"ids": ["0-1"], "delay_ms": 5.5}, "delay_ms"),
        ("nack", {"ids": ["0-1"], "delay_ms": -5}, "delay_ms"),
        ("nack", {"ids": ["0-1"], "delay_ms": "5"}, "delay_ms"),
        ("nack", {"delay_ms": 5}, "ids"),
    ],
)
async def test_bad_ack_nack(
    client: TestClient, backend: RecordingBackend, consumer: str, path: str, body: dict, field: str, G: str
) -> None:
    err = await error_of(await client.post(f"{G}/consumers/{consumer}/{path}", json=body), 400, "invalid_request")
    assert err["field"] == field
    assert backend.calls == []


@pytest.mark.parametrize("path", ["ack", "nack"])
async def test_ack_nack_need_a_body(client: TestClient, backend: RecordingBackend, consumer: str, path: str, G: str) -> None:
    await error_of(await client.post(f"{G}/consumers/{consumer}/{path}"), 400, "invalid_request")
    assert backend.calls == []


async def test_unknown_consumer_group_queue(client: TestClient, consumer: str, G: str, q: str) -> None:
    await error_of(await client.post(f"{G}/consumers/nobody/poll", json={}), 404, "consumer_not_found")
    await error_of(await client.post(f"/v1/queues/{q}/groups/other/consumers/c1/ack", json={"ids": []}), 404, "group_not_found")
    await error_of(await client.post(f"/v1/queues/{q}-none/groups/g/consumers", json={}), 404, "queue_not_found")
    await error_of(await client.get(f"/v1/queues/{q}/groups/other"), 404, "group_not_found")


async def test_bad_names_in_the_path(client: TestClient, backend: RecordingBackend, consumer: str, G: str, q: str) -> None:
    err = await error_of(await client.post(f"/v1/queues/{q}/groups/g!/consumers", json={}), 400, "invalid_name")
    assert err["field"] == "group"
    err = await error_of(await client.post(f"{G}/consumers/{'c' * 129}/poll", json={}), 400, "invalid_name")
    assert err["field"] == "consumer_id"
    assert backend.calls == []


async def test_join_isolation_from_body_then_headers_then_defaults(
    client: TestClient, backend: RecordingBackend, consumer: str, G: str
) -> None:
    await client.post(G + "/consumers", json={})
    await client.post(G + "/consumers", json={"lane": "feat-b", "set": ""}, headers={"X-Lane": "feat-a", "X-Set": "eu", "X-Env": "test"})
    await client.post(G + "/consumers", json={"start": "latest"}, headers={"X-Lane": "feat-a"})
    specs: list[JoinSpec] = [args[2] for args in calls(backend, "join")]
    assert [(s.context, s.start) for s in specs] == [
        (IsolationContext(), "earliest"),
        (IsolationContext("test", "", "feat-b"), "earliest"),
        (IsolationContext("prod", "", "feat-a"), "latest"),
    ]
    assert all(s.consumer_id is None for s in specs)


@pytest.mark.parametrize(
    ("body", "headers", "status_code"),
    [
        ({"lane": "Feat"}, {}, "invalid_request"),
        ({"start": "now"}, {}, "invalid_request"),
        ({"consumer_id": "a b"}, {}, "invalid_request"),
        ({}, {"X-Env": "PROD"}, "invalid_header"),
    ],
)
async def test_bad_join(
    client: TestClient, backend: RecordingBackend, consumer: str, body: dict, headers: dict, status_code: str, G: str
) -> None:
    await error_of(await client.post(G + "/consumers", json=body, headers=headers), 400, status_code)
    assert backend.calls == []


async def test_leave_and_group_info(client: TestClient, backend: RecordingBackend, consumer: str, G: str) -> None:
    await client.post(G + "/consumers", json={"consumer_id": "c2", "lane": "feat-a"})
    await client.post(f"{G}/consumers/{consumer}/poll", json={"max_messages": 2, "wait_ms": 5000})
    info = GroupInfo.model_validate(await (await client.get(G)).json())
    assert {m.consumer_id: m.in_flight for m in info.members} == {"c1": 2, "c2": 0}
    assert {m.consumer_id: m.lane for m in info.members} == {"c1": "", "c2": "feat-a"}
    assert info.lag.total == 5 and info.lag.by_env == {"prod": 5}
    r = await client.delete(f"{G}/consumers/{consumer}")
    assert r.status == 204
    await error_of(await client.delete(f"{G}/consumers/{consumer}"), 404, "consumer_not_found")
    # c1's two in-flight messages are deliverable at once; backbone messages never go to the
    # feat-a lane, so a backbone consumer takes them
    await client.post(G + "/consumers", json={"consumer_id": "c3"})
    r = await client.post(f"{G}/consumers/c3/poll", json={"wait_ms": 5000})
    got = PollResponse.model_validate(await r.json()).messages
    assert sorted(m.value for m in got) == [0, 1, 2, 3, 4]
    assert sorted(m.delivery_count for m in got) == [1, 1, 1, 2, 2]


async def test_delivery_metrics(client: TestClient, consumer: str, G: str, q: str) -> None:
    r = await client.post(f"{G}/consumers/{consumer}/poll", json={"max_messages": 2, "wait_ms": 5000})
    got = (await r.json())["messages"]
    await client.post(f"{G}/consumers/{consumer}/ack", json={"ids": [got[0]["id"]]})
    await client.post(f"{G}/consumers/{consumer}/nack", json={"ids": [got[1]["id"]]})
    text = await (await client.get("/metrics")).text()
    assert f'vpq_gateway_delivered_messages_total{{group="g",queue="{q}"}} 2.0' in text
    assert f'vpq_gateway_acked_messages_total{{group="g",queue="{q}"}} 1.0' in text
    assert f'vpq_gateway_nacked_messages_total{{group="g",queue="{q}"}} 1.0' in text
