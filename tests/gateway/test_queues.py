"""Queue administration: PUT/GET/DELETE /v1/queues/{queue}, GET /v1/queues, on the real
gateway over the real cluster backend."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient
from yarl import URL

from tests.gateway.conftest import MakeClient, RecordingBackend, error_of
from vpq.config.settings import QueueDefaults
from vpq.gateway.responses import QueueInfo, QueueList


async def test_create_then_update(client: TestClient, backend: RecordingBackend) -> None:
    r = await client.put("/v1/queues/orders", json={"virtual_partitions": 4, "ordering": "none"})
    assert r.status == 201
    q = QueueInfo.model_validate(await r.json())
    assert (q.name, q.virtual_partitions, q.ordering, q.max_deliveries) == ("orders", 4, "none", 5)
    assert len(q.placement) == 4
    r = await client.put("/v1/queues/orders", json={"max_deliveries": 9})
    assert r.status == 200
    q = QueueInfo.model_validate(await r.json())
    assert (q.virtual_partitions, q.ordering, q.max_deliveries) == (4, "none", 9)
    assert backend.calls[1] == ("put_queue", ("orders", {"max_deliveries": 9}))


async def test_create_with_empty_body_takes_defaults(client: TestClient, backend: RecordingBackend) -> None:
    r = await client.put("/v1/queues/a.b_c-1")
    assert r.status == 201
    q = QueueInfo.model_validate(await r.json())
    assert (q.virtual_partitions, q.ordering, q.max_deliveries, q.visibility_timeout_ms, q.max_message_bytes) == (
        16, "key", 5, 30000, 1024 * 1024
    )
    assert backend.calls == [("put_queue", ("a.b_c-1", {}))]


async def test_null_fields_mean_not_given(client: TestClient, backend: RecordingBackend) -> None:
    r = await client.put("/v1/queues/q", json={"retention_ms": None})
    assert r.status == 201
    assert backend.calls == [("put_queue", ("q", {}))]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"virtual_partitions": 3}, "virtual_partitions"),
        ({"virtual_partitions": 0}, "virtual_partitions"),
        ({"virtual_partitions": 12}, "virtual_partitions"),
        ({"virtual_partitions": "16"}, "virtual_partitions"),
        ({"virtual_partitions": 16.5}, "virtual_partitions"),
        ({"ordering": "fifo"}, "ordering"),
        ({"max_deliveries": 0}, "max_deliveries"),
        ({"max_deliveries": True}, "max_deliveries"),
        ({"visibility_timeout_ms": 0}, "visibility_timeout_ms"),
        ({"retention_ms": 0}, "retention_ms"),
        ({"retention_ms": -2}, "retention_ms"),
        ({"max_message_bytes": 0}, "max_message_bytes"),
        ({"partitions": 4}, "partitions"),
    ],
)
async def test_invalid_config_is_400_and_changes_nothing(
    client: TestClient, backend: RecordingBackend, body: dict, field: str
) -> None:
    err = await error_of(await client.put("/v1/queues/orders", json=body), 400, "invalid_request")
    assert err["field"] == field
    assert backend.calls == [] and await backend.real.list_queues() == []


async def test_virtual_partitions_above_the_platform_maximum(make_client: MakeClient, backend: RecordingBackend) -> None:
    client = await make_client(queue_defaults=QueueDefaults(max_virtual_partitions=64))
    err = await error_of(await client.put("/v1/queues/q", json={"virtual_partitions": 128}), 400, "invalid_request")
    assert err["field"] == "virtual_partitions"
    assert backend.calls == []
    assert (await client.put("/v1/queues/q", json={"virtual_partitions": 64})).status == 201


async def test_shrinking_is_a_conflict(client: TestClient, backend: RecordingBackend) -> None:
    assert (await client.put("/v1/queues/q", json={"virtual_partitions": 8})).status == 201
    await error_of(await client.put("/v1/queues/q", json={"virtual_partitions": 4}), 409, "virtual_partitions_shrink")
    assert (await backend.real.get_queue("q"))["virtual_partitions"] == 8


@pytest.mark.parametrize("name", ["bad name", "x" * 129, "a:b", "émile", "a%2Fb", "a*"])
async def test_bad_queue_names(client: TestClient, backend: RecordingBackend, name: str) -> None:
    err = await error_of(await client.put(f"/v1/queues/{name}", json={}), 400, "invalid_name")
    assert err["field"] == "queue"
    assert backend.calls == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/v1/queues/%2E%2E"),
        ("PUT", "/v1/queues/%2E"),
        ("POST", "/v1/queues/%2e%2E/messages"),
        ("POST", "/v1/queues/orders/groups/%2E%2E/consumers"),
        ("POST", "/v1/queues/orders/groups/g/consumers/%2E%2E/poll"),
    ],
)
async def test_dot_segment_names_are_invalid(client: TestClient, backend: RecordingBackend, method: str, path: str) -> None:
    """``.`` and ``..`` reach the server only percent-encoded (clients resolve them away), and
    a queue, group or consumer so named could never be consumed: 400, nothing created."""
    url = URL(str(client.make_url("/")).rstrip("/") + path, encoded=True)  # sent as is, not normalized
    async with client.session.request(method, url, json={"messages": [{"value": 1}]} if "messages" in path else {}) as r:
        err = await error_of(r, 400, "invalid_name")
    assert err["field"] in ("queue", "group", "consumer_id")
    assert backend.calls == []


async def test_longest_valid_name(client: TestClient) -> None:
    assert (await client.put("/v1/queues/" + "x" * 128)).status == 201


async def test_get_list_delete(client: TestClient, backend: RecordingBackend) -> None:
    for name in ("b", "a"):
        assert (await client.put(f"/v1/queues/{name}")).status == 201
    r = await client.get("/v1/queues/a")
    assert r.status == 200 and QueueInfo.model_validate(await r.json()).name == "a"
    listed = QueueList.model_validate(await (await client.get("/v1/queues")).json())
    assert [q.name for q in listed.queues] == ["a", "b"]
    r = await client.delete("/v1/queues/a")
    assert r.status == 204
    await error_of(await client.get("/v1/queues/a"), 404, "queue_not_found")
    await error_of(await client.delete("/v1/queues/a"), 404, "queue_not_found")
    assert [q["name"] for q in await backend.real.list_queues()] == ["b"]


async def test_put_needs_json_content_type(client: TestClient, backend: RecordingBackend) -> None:
    r = await client.put("/v1/queues/q", data=b'{"virtual_partitions": 4}', headers={"Content-Type": "text/plain"})
    await error_of(r, 415, "unsupported_media_type")
    assert backend.calls == []


@pytest.mark.parametrize("raw", [b"{", b"[1, 2]", b'"q"', b"nul"])
async def test_put_with_a_body_that_is_not_an_object(client: TestClient, backend: RecordingBackend, raw: bytes) -> None:
    r = await client.put("/v1/queues/q", data=raw, headers={"Content-Type": "application/json"})
    err = await error_of(r, 400)
    assert err["code"] in ("malformed_json", "invalid_request")
    assert backend.calls == []
