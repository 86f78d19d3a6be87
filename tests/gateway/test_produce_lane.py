"""The produce lane (``gateway.produce_lane``) answers exactly what the aiohttp path
answers: the same requests go to a ``GatewayServer`` with the lane and to one without,
over the real backend, and the answers and the batches handed to the backend must match.
Answers of the lane carry no ``Server`` header (aiohttp's do), which tells who answered."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.gateway.conftest import RecordingBackend
from vpq.config.settings import AuthToken, GatewaySettings
from vpq.gateway.app import create_app
from vpq.gateway.server import GatewayServer

pytestmark = pytest.mark.timeout(60)

JSON = {"Content-Type": "application/json"}
VALUE = "v" * 300

# (name, path, body, extra headers, answered by the lane when it is on)
CASES: list[tuple[str, str, bytes, dict[str, str], bool]] = [
    (
        "plain batch",
        "/v1/queues/orders/messages",
        orjson.dumps(
            {
                "messages": [
                    {"key": "k1", "value": {"n": 1, "s": VALUE}},
                    {"key": "k2", "value": "text", "headers": {"h": "1"}, "env": "test"},
                    {"value": [1, 2, 3], "priority": 7, "dedup_id": "d-1"},
                ]
            }
        ),
        {"X-Lane": "blue"},
        True,
    ),
    (
        "base64 value (the models' path)",
        "/v1/queues/orders/messages",
        orjson.dumps({"messages": [{"key": "k", "value_b64": base64.b64encode(b"\x00\x01").decode()}]}),
        {},
        True,
    ),
    ("unknown queue", "/v1/queues/nope/messages", b'{"messages":[{"value":1}]}', {}, True),
    ("extra field", "/v1/queues/orders/messages", b'{"messages":[{"value":1,"valu":2}]}', {}, True),
    ("malformed JSON", "/v1/queues/orders/messages", b'{"messages":[{"value":1}', {}, True),
    ("empty list", "/v1/queues/orders/messages", b'{"messages":[]}', {}, True),
    ("invalid queue name", "/v1/queues/bad!name/messages", b'{"messages":[{"value":1}]}', {}, True),
    ("escaped queue name", "/v1/queues/bad%20name/messages", b'{"messages":[{"value":1}]}', {}, False),
    ("invalid isolation header", "/v1/queues/orders/messages", b'{"messages":[{"value":1}]}', {"X-Env": "no good"}, True),
    ("text body", "/v1/queues/orders/messages", b'{"messages":[{"value":1}]}', {"Content-Type": "text/plain"}, False),
    ("body over the limit", "/v1/queues/orders/messages", orjson.dumps({"messages": [{"value": "x" * 5000}]}), {}, False),
    ("query string", "/v1/queues/orders/messages?x=1", b'{"messages":[{"value":1}]}', {}, False),
]


def normalised(status: int, body: bytes) -> Any:
    """The answer without what differs from one append to the next (offsets, ids)."""
    data = orjson.loads(body)
    if status == 200:
        return [sorted(r) for r in data["results"]]
    return data


async def _served(settings: GatewaySettings, backend: RecordingBackend) -> GatewayServer:
    server = GatewayServer(create_app(settings, backend, manage_backend=False), settings)  # type: ignore[arg-type]
    await server.start()
    return server


@pytest.fixture
async def two_gateways(backend: RecordingBackend) -> AsyncIterator[tuple[str, str]]:
    await backend.start()
    on = await _served(GatewaySettings(port=0, max_request_bytes=4096), backend)
    off = await _served(GatewaySettings(port=0, max_request_bytes=4096, produce_lane=False), backend)
    try:
        async with aiohttp.ClientSession() as s, s.put(on.url + "/v1/queues/orders", json={}) as r:
            assert r.status == 201
        yield on.url, off.url
    finally:
        await on.stop()
        await off.stop()


async def _send(session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]) -> tuple[int, str, bytes, bool]:
    async with session.post(url, data=body, headers={**JSON, **headers}) as r:
        return r.status, r.content_type, await r.read(), "Server" in r.headers


async def test_the_lane_answers_what_the_app_answers(two_gateways: tuple[str, str], backend: RecordingBackend) -> None:
    on, off = two_gateways
    # a new connection for each request: a connection handed over to aiohttp stays there
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        for name, path, body, headers, in_lane in CASES:
            backend.calls.clear()
            status_on, type_on, body_on, by_app_on = await _send(session, on + path, body, headers)
            produced_on = [c for c in backend.calls if c[0] == "produce"]
            backend.calls.clear()
            status_off, type_off, body_off, by_app_off = await _send(session, off + path, body, headers)
            produced_off = [c for c in backend.calls if c[0] == "produce"]
            assert (status_on, type_on) == (status_off, type_off), name
            assert normalised(status_on, body_on) == normalised(status_off, body_off), name
            assert produced_on == produced_off, name
            assert by_app_off, name
            assert by_app_on is not in_lane, name


async def test_the_lane_keeps_the_metrics(two_gateways: tuple[str, str]) -> None:
    on, _ = two_gateways
    async with aiohttp.ClientSession() as session:
        for _ in range(3):
            status, _, _, by_app = await _send(session, on + "/v1/queues/orders/messages", b'{"messages":[{"value":1},{"value":2}]}', {})
            assert status == 200 and not by_app
        async with session.get(on + "/metrics") as r:
            text = await r.text()
    assert 'vpq_gateway_requests_total{method="POST",route="/v1/queues/{queue}/messages",status="200"} 3.0' in text
    assert 'vpq_gateway_produced_messages_total{queue="orders"} 6' in text
    assert 'vpq_gateway_request_seconds_count{method="POST",route="/v1/queues/{queue}/messages"} 3.0' in text
    assert "vpq_gateway_in_flight_requests 1.0" in text  # the /metrics request itself


async def test_auth_in_the_lane(backend: RecordingBackend) -> None:
    tokens = [
        AuthToken(token="prod", scopes={"produce": ["orders"]}),
        AuthToken(token="cons", scopes={"consume": ["orders"]}),
        AuthToken(token="root", scopes={"admin": ["*"]}),
    ]
    await backend.start()
    server = await _served(GatewaySettings(port=0, auth_enabled=True, tokens=tokens), backend)
    body = b'{"messages":[{"value":1}]}'
    url = server.url + "/v1/queues/orders/messages"
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
            async with session.put(server.url + "/v1/queues/orders", json={}, headers={"Authorization": "Bearer root"}) as r:
                assert r.status == 201
            assert (await _send(session, url, body, {}))[::3] == (401, False)
            assert (await _send(session, url, body, {"Authorization": "Bearer wrong"}))[::3] == (401, False)
            assert (await _send(session, url, body, {"Authorization": "Bearer cons"}))[::3] == (403, False)
            assert (await _send(session, url, body, {"Authorization": "Bearer prod"}))[::3] == (200, False)
    finally:
        await server.stop()
