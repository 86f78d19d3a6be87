"""The OpenAPI document: complete, self-consistent, and in agreement with API.md."""

from __future__ import annotations

import re
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tests.contract import API_MD, NOT_BUILT_YET
from vpq.config.settings import AuthToken, GatewaySettings, QueueDefaults
from vpq.gateway.models import JoinRequest, PollRequest, ProduceMessage, QueueConfigRequest
from vpq.gateway.openapi import build_openapi
from vpq.gateway.responses import DeliveredMessage, ProduceResult
from vpq.gateway.routes import ROUTES

# Every endpoint of API.md, transcribed ("..." expanded).
API_MD_ENDPOINTS = {
    ("PUT", "/v1/queues/{queue}"),
    ("GET", "/v1/queues"),
    ("GET", "/v1/queues/{queue}"),
    ("DELETE", "/v1/queues/{queue}"),
    ("POST", "/v1/queues/{queue}/messages"),
    ("POST", "/v1/queues/{queue}/groups/{group}/consumers"),
    ("POST", "/v1/queues/{queue}/groups/{group}/consumers/{consumer_id}/poll"),
    ("POST", "/v1/queues/{queue}/groups/{group}/consumers/{consumer_id}/ack"),
    ("POST", "/v1/queues/{queue}/groups/{group}/consumers/{consumer_id}/nack"),
    ("DELETE", "/v1/queues/{queue}/groups/{group}/consumers/{consumer_id}"),
    ("GET", "/v1/queues/{queue}/groups/{group}"),
    ("DELETE", "/v1/queues/{queue}/groups/{group}"),
    ("POST", "/v1/queues/{queue}/groups/{group}/dlq/redrive"),
    ("GET", "/v1/cluster"),
    ("POST", "/v1/cluster/partitions/{pp}/leader"),
    ("GET", "/v1/maps/current"),
    ("GET", "/v1/maps/history"),
    ("GET", "/ui"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
    ("GET", "/readyz"),
    ("GET", "/healthz"),
}



@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    return build_openapi(ROUTES)


def operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(m.upper(), p) for p, item in doc["paths"].items() for m in item}


def test_every_route_of_the_table_is_documented(doc: dict[str, Any]) -> None:
    assert operations(doc) == {(r.method, r.path) for r in ROUTES}
    ids = [op["operationId"] for item in doc["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids)) == len(ROUTES)


def test_agrees_with_api_md(doc: dict[str, Any]) -> None:
    assert API_MD_ENDPOINTS <= operations(doc)
    assert operations(doc) - API_MD_ENDPOINTS == {("GET", "/docs")}


def test_agrees_with_docs_api_md() -> None:
    text = API_MD.read_text()
    found = set()
    for method, path in re.findall(r"`(GET|PUT|POST|DELETE) ([^`\s]+)", text):
        path = path.replace(".../groups/{group}", "/v1/queues/{queue}/groups/{group}").split("?")[0]
        found.add((method, path.replace("...", "/v1/queues/{queue}/groups/{group}")))
    assert found == API_MD_ENDPOINTS | set(NOT_BUILT_YET)
    assert not set(NOT_BUILT_YET) & operations(build_openapi(ROUTES)), "served now: drop it from NOT_BUILT_YET"


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        out = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for v in node.values():
            out += _refs(v)
        return out
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_every_ref_resolves(doc: dict[str, Any]) -> None:
    refs = _refs(doc)
    assert refs
    for ref in refs:
        assert ref.startswith("#/")
        node: Any = doc
        for part in ref[2:].split("/"):
            assert part in node, ref
            node = node[part]
        assert isinstance(node, dict)


def test_document_shape(doc: dict[str, Any]) -> None:
    assert doc["openapi"].startswith("3.1")
    assert doc["info"]["title"] and doc["info"]["version"]
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {"type": "http", "scheme": "bearer"}
    for path, item in doc["paths"].items():
        placeholders = set(re.findall(r"\{(\w+)\}", path))
        for method, op in item.items():
            assert method in {"get", "put", "post", "delete"}
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == placeholders, (method, path)
            assert op["responses"] and "default" in op["responses"]
            assert any(s.startswith("2") for s in op["responses"]), (method, path)
            assert op["x-vpq-access"]
            if op["x-vpq-access"] != "open":
                assert "401" in op["responses"] and op["security"] == [{"bearerAuth": []}]


def test_specific_operations(doc: dict[str, Any]) -> None:
    put = doc["paths"]["/v1/queues/{queue}"]["put"]
    assert {"200", "201", "400", "409", "413", "415"} <= set(put["responses"])
    produce = doc["paths"]["/v1/queues/{queue}/messages"]["post"]
    assert produce["requestBody"]["required"] is True
    assert {p["name"] for p in produce["parameters"] if p["in"] == "header"} == {"X-Lane", "X-Env", "X-Set"}
    assert "Retry-After" in produce["responses"]["429"]["headers"]
    poll = doc["paths"]["/v1/queues/{queue}/groups/{group}/consumers/{consumer_id}/poll"]["post"]
    assert poll["requestBody"]["required"] is False
    schemas = doc["components"]["schemas"]
    max_messages = dict(schemas["PollRequest"]["properties"]["max_messages"])
    assert "fair share" in max_messages.pop("description")  # a poll may answer fewer
    assert max_messages == {"default": 100, "maximum": 1000, "minimum": 1, "title": "Max Messages", "type": "integer"}
    assert schemas["PollRequest"]["properties"]["wait_ms"]["maximum"] == 30000
    assert set(schemas["ProduceMessage"]["properties"]) == {
        "key", "value", "value_b64", "headers", "lane", "env", "set", "delay_ms", "deliver_at_ms", "priority", "dedup_id"
    }  # fmt: skip
    assert schemas["ProduceMessage"]["not"] == {"required": ["delay_ms", "deliver_at_ms"]}
    assert "text/plain" in doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]


def test_field_names_are_the_api_md_names() -> None:
    def names(model: Any) -> set[str]:
        return {f.alias or n for n, f in model.model_fields.items()}

    assert names(QueueConfigRequest) == {
        "virtual_partitions", "ordering", "max_deliveries", "visibility_timeout_ms", "retention_ms", "max_message_bytes",
        "dedup_window_ms",
    }  # fmt: skip
    assert names(ProduceMessage) == {
        "key", "value", "value_b64", "headers", "lane", "env", "set", "delay_ms", "deliver_at_ms", "priority", "dedup_id"
    }  # fmt: skip
    assert names(ProduceResult) == {"id", "partition", "offset", "virtual_partition"}
    assert names(JoinRequest) == {"consumer_id", "lane", "env", "set", "start"}
    assert names(PollRequest) == {"max_messages", "wait_ms", "ack"}
    assert names(DeliveredMessage) == {
        "id", "queue", "key", "value", "value_b64", "headers", "lane", "env", "set",
        "partition", "offset", "virtual_partition", "timestamp_ms", "delivery_count",
    }


async def test_served_document_and_docs_page(client: TestClient, doc: dict[str, Any]) -> None:
    r = await client.get("/openapi.json")
    assert r.status == 200 and r.content_type == "application/json"
    served = await r.json()
    # the served document describes this server: auth disabled (the default), V at most 4096
    assert served == build_openapi(ROUTES, auth_enabled=False, max_virtual_partitions=QueueDefaults().max_virtual_partitions)
    assert all(op["security"] == [] for item in served["paths"].values() for op in item.values())
    vp = served["components"]["schemas"]["QueueConfigRequest"]["properties"]["virtual_partitions"]["anyOf"][0]
    assert vp["enum"] == [1 << i for i in range(13)]
    full = doc["components"]["schemas"]["QueueConfigRequest"]["properties"]["virtual_partitions"]["anyOf"][0]
    assert full["enum"][-1] == 65536
    r = await client.get("/docs")
    assert r.status == 200 and r.content_type == "text/html"
    html = await r.text()
    for path, item in doc["paths"].items():
        for op in item.values():
            assert f'id="{op["operationId"]}"' in html
        assert path in html
    for name in doc["components"]["schemas"]:
        assert f'id="schema-{name}"' in html
    assert "order-42" in html  # request examples are shown
    assert not re.search(r"(src|href)=\"(https?:)?//", html)  # nothing from the network
    assert "<script" not in html


async def test_served_document_requires_tokens_when_auth_is_enabled(make_client: Any, doc: dict[str, Any]) -> None:
    settings = GatewaySettings(auth_enabled=True, tokens=[AuthToken(token="t", scopes={"admin": ["*"]})])
    client = await make_client(settings, queue_defaults=QueueDefaults(max_virtual_partitions=1 << 16))
    served = await (await client.get("/openapi.json")).json()
    assert served == doc
    secured = {(m, p) for p, item in served["paths"].items() for m, op in item.items() if op["security"]}
    assert secured == {(m, p) for p, item in served["paths"].items() for m, op in item.items() if op["x-vpq-access"] != "open"}
    assert ("get", "/readyz") not in secured and ("post", "/v1/queues/{queue}/messages") in secured
