"""POST /v1/queues/{queue}/messages on the real gateway over the real cluster backend:
results, isolation precedence, all-or-nothing."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient

from tests.gateway.conftest import MakeClient, RecordingBackend, error_of, read_all
from vpq.config.settings import GatewaySettings
from vpq.gateway.models import MAX_BATCH_MESSAGES
from vpq.gateway.responses import ProduceResponse

URL = "/v1/queues/orders/messages"


@pytest.fixture
async def queue(client: TestClient, backend: RecordingBackend) -> str:
    assert (await client.put("/v1/queues/orders", json={"virtual_partitions": 8})).status == 201
    backend.calls.clear()
    return "orders"


def produced(backend: RecordingBackend) -> list[Any]:
    return [args for name, args in backend.calls if name == "produce"]


async def test_results_in_request_order(client: TestClient, backend: RecordingBackend, queue: str) -> None:
    msgs = [{"key": f"k{i}", "value": {"n": i}} for i in range(5)]
    r = await client.post(URL, json={"messages": msgs})
    assert r.status == 200
    results = ProduceResponse.model_validate(await r.json()).results
    stored = {m["id"]: m for m in await read_all(client, queue, 5)}
    assert [stored[res.id]["value"] for res in results] == [{"n": i} for i in range(5)]
    assert all((stored[res.id]["partition"], stored[res.id]["offset"]) == (res.partition, res.offset) for res in results)
    assert len({res.id for res in results}) == 5
    assert all(0 <= res.virtual_partition < 8 for res in results)


async def test_json_and_bytes_values_are_stored_as_given(client: TestClient, backend: RecordingBackend, queue: str) -> None:
    raw = bytes(range(256))
    body = {"messages": [{"value": None}, {"value": [1, "x", True]}, {"value_b64": base64.b64encode(raw).decode()}, {"value_b64": ""}]}
    assert (await client.post(URL, json=body)).status == 200
    (args,) = produced(backend)
    sent = args[1]
    assert [(m.value_is_json, m.value) for m in sent] == [
        (True, b"null"),
        (True, b'[1,"x",true]'),
        (False, raw),
        (False, b""),
    ]


async def test_round_trip_through_poll(client: TestClient, queue: str) -> None:
    body = {"messages": [{"key": "a", "value": {"x": 1}, "headers": {"h": "v"}}, {"key": "a", "value_b64": "AAE="}]}
    assert (await client.post(URL, json=body)).status == 200
    cid = (await (await client.post("/v1/queues/orders/groups/g/consumers", json={})).json())["consumer_id"]
    r = await client.post(f"/v1/queues/orders/groups/g/consumers/{cid}/poll", json={"wait_ms": 5000})
    got = (await r.json())["messages"]
    assert got[0]["value"] == {"x": 1} and "value_b64" not in got[0] and got[0]["headers"] == {"h": "v"}
    assert got[1]["value_b64"] == "AAE=" and "value" not in got[1]


def contexts(backend: RecordingBackend) -> list[tuple[str, str, str]]:
    (args,) = produced(backend)
    return [(m.context.env, m.context.set, m.context.lane) for m in args[1]]


async def test_defaults_without_headers(client: TestClient, backend: RecordingBackend, queue: str) -> None:
    assert (await client.post(URL, json={"messages": [{"value": 1}]})).status == 200
    assert contexts(backend) == [("prod", "", "")]


async def test_headers_apply_to_messages_without_fields(client: TestClient, backend: RecordingBackend, queue: str) -> None:
    body = {
        "messages": [
            {"value": 1},
            {"value": 2, "lane": "feat-b"},
            {"value": 3, "lane": "", "env": "dev", "set": "eu-1"},
            {"value": 4, "env": ""},
        ]
    }
    headers = {"X-Lane": "feat-a", "X-Env": "test", "x-set": " cn-2 "}
    assert (await client.post(URL, json=body, headers=headers)).status == 200
    assert contexts(backend) == [
        ("test", "cn-2", "feat-a"),
        ("test", "cn-2", "feat-b"),
        ("dev", "eu-1", ""),
        ("prod", "cn-2", "feat-a"),
    ]


@pytest.mark.parametrize(("header", "value"), [("X-Lane", "Feat-A"), ("X-Env", "te st"), ("X-Set", "a/b"), ("X-Lane", "x" * 64)])
async def test_bad_isolation_header(client: TestClient, backend: RecordingBackend, queue: str, header: str, value: str) -> None:
    err = await error_of(await client.post(URL, json={"messages": [{"value": 1}]}, headers={header: value}), 400, "invalid_header")
    assert err["field"] == header[2:].lower()
    assert produced(backend) == []


BAD_MESSAGES: list[tuple[dict[str, Any], str]] = [
    ({}, "messages[{i}]"),
    ({"value": 1, "value_b64": "AA=="}, "messages[{i}]"),
    ({"value_b64": "not base64!"}, "messages[{i}].value_b64"),
    ({"value_b64": "AAA"}, "messages[{i}].value_b64"),
    ({"value_b64": None}, "messages[{i}]"),
    ({"value_b64": 12}, "messages[{i}].value_b64"),
    ({"value": 1, "lane": "Feat-A"}, "messages[{i}].lane"),
    ({"value": 1, "lane": "feat_a"}, "messages[{i}].lane"),
    ({"value": 1, "lane": "a\n"}, "messages[{i}].lane"),
    ({"value": 1, "env": "x" * 64}, "messages[{i}].env"),
    ({"value": 1, "set": "EU"}, "messages[{i}].set"),
    ({"value": 1, "key": 5}, "messages[{i}].key"),
    ({"value": 1, "headers": {"h": 1}}, "messages[{i}].headers.h"),
    ({"value": 1, "headers": ["h"]}, "messages[{i}].headers"),
    ({"value": 1, "vlaue": 2}, "messages[{i}].vlaue"),
]


@pytest.mark.parametrize(("bad", "field"), BAD_MESSAGES)
async def test_one_bad_message_rejects_the_batch(
    client: TestClient, backend: RecordingBackend, queue: str, bad: dict[str, Any], field: str
) -> None:
    msgs: list[Any] = [{"value": i} for i in range(6)]
    msgs[3] = bad
    err = await error_of(await client.post(URL, json={"messages": msgs}), 400, "invalid_message")
    assert err["index"] == 3
    assert err["field"] == field.format(i=3)
    assert produced(backend) == [] and await read_all(client, queue, 0) == []


async def test_index_is_the_first_bad_message(client: TestClient, backend: RecordingBackend, queue: str) -> None:
    msgs: list[Any] = [{"value": 0}, {"value": 1}, {"value_b64": "%"}, {"value": 3}, {}, {"lane": "X"}]
    err = await error_of(await client.post(URL, json={"messages": msgs}), 400, "invalid_message")
    assert err["index"] == 2
    assert all(e["field"].startswith("messages[2]") for e in err["errors"])
    assert produced(backend) == []


@pytest.mark.parametrize(
    "body",
    [{}, {"messages": []}, {"messages": None}, {"messages": {"value": 1}}, {"messages": [{"value": 1}], "extra": 1}],
)
async def test_bad_batch_shape(client: TestClient, backend: RecordingBackend, queue: str, body: dict[str, Any]) -> None:
    err = await error_of(await client.post(URL, json=body), 400, "invalid_request")
    assert err["field"].startswith("messages") or err["field"] == "extra"
    assert produced(backend) == []


async def test_too_many_messages(client: TestClient, backend: RecordingBackend, queue: str) -> None:
    body = {"messages": [{"value": 1}] * (MAX_BATCH_MESSAGES + 1)}
    err = await error_of(await client.post(URL, json=body), 400, "invalid_request")
    assert err["field"] == "messages"
    assert produced(backend) == []


async def test_empty_body_is_400(client: TestClient, backend: RecordingBackend, queue: str) -> None:
    await error_of(await client.post(URL, data=b"", headers={"Content-Type": "application/json"}), 400, "invalid_request")
    assert produced(backend) == []


@pytest.mark.parametrize("raw", [b"{", b'{"messages": [}', b"\xff\xfe", b'{"messages": [{"value": NaN}]}'])
async def test_malformed_json(client: TestClient, backend: RecordingBackend, queue: str, raw: bytes) -> None:
    await error_of(await client.post(URL, data=raw, headers={"Content-Type": "application/json"}), 400, "malformed_json")
    assert produced(backend) == []


async def test_body_must_be_an_object(client: TestClient, backend: RecordingBackend, queue: str) -> None:
    await error_of(await client.post(URL, data=b"[1]", headers={"Content-Type": "application/json"}), 400, "invalid_request")


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "application/octet-stream", None])
async def test_wrong_content_type(client: TestClient, backend: RecordingBackend, queue: str, ctype: str | None) -> None:
    data = orjson.dumps({"messages": [{"value": 1}]})
    headers = {"Content-Type": ctype} if ctype else {}
    r = await client.post(URL, data=data, headers=headers, skip_auto_headers=["Content-Type"])
    await error_of(r, 415, "unsupported_media_type")
    assert produced(backend) == []


async def test_json_with_charset_and_suffix_types_are_accepted(client: TestClient, queue: str) -> None:
    data = orjson.dumps({"messages": [{"value": 1}]})
    for ctype in ("application/json; charset=utf-8", "application/vnd.vpq+json"):
        assert (await client.post(URL, data=data, headers={"Content-Type": ctype})).status == 200


async def test_oversize_body_is_413(make_client: MakeClient, backend: RecordingBackend) -> None:
    client = await make_client(GatewaySettings(max_request_bytes=1024))
    assert (await client.put("/v1/queues/orders")).status == 201
    body = orjson.dumps({"messages": [{"value": "x" * 2000}]})
    await error_of(await client.post(URL, data=body, headers={"Content-Type": "application/json"}), 413, "payload_too_large")

    async def chunks() -> Any:
        yield body[:600]
        yield body[600:]

    r = await client.post(URL, data=chunks(), headers={"Content-Type": "application/json"})
    await error_of(r, 413, "payload_too_large")
    assert produced(backend) == []
    small = orjson.dumps({"messages": [{"value": "x" * 100}]})
    assert (await client.post(URL, data=small, headers={"Content-Type": "application/json"})).status == 200


async def test_message_over_the_queue_limit_is_413_with_index(client: TestClient, backend: RecordingBackend) -> None:
    assert (await client.put("/v1/queues/orders", json={"max_message_bytes": 100})).status == 201
    msgs = [{"value": "a"}, {"value": "b" * 200}, {"value": "c" * 300}]
    err = await error_of(await client.post(URL, json={"messages": msgs}), 413, "message_too_large")
    assert err["index"] == 1
    assert await read_all(client, "orders", 0) == []


async def test_unknown_queue_is_404(client: TestClient, backend: RecordingBackend) -> None:
    await error_of(await client.post("/v1/queues/nope/messages", json={"messages": [{"value": 1}]}), 404, "queue_not_found")


async def test_bad_queue_name_is_checked_before_the_body(client: TestClient, backend: RecordingBackend) -> None:
    await error_of(await client.post("/v1/queues/no%20pe/messages", json={"messages": [{"value": 1}]}), 400, "invalid_name")
    assert backend.calls == []
