"""Every failure is a JSON error: routes, methods, backend errors, bugs.

Routes and methods are checked on the real gateway over the real cluster backend. Errors
a healthy platform does not raise on demand (a conflict from a read node, overload, a
bug) come from ``FailingBackend``, a backend local to this file that raises one given
exception from every call."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from tests.gateway.conftest import RecordingBackend, error_of
from vpq.common.errors import Conflict, Overloaded, Unavailable
from vpq.config.settings import GatewaySettings
from vpq.gateway.app import create_app


class FailingBackend:
    """Ready, and every other call raises ``error`` (``produce`` may be replaced)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def ready(self) -> bool:
        return True

    async def metrics_text(self) -> str:
        return ""

    def __getattr__(self, name: str) -> Any:
        async def fail(*args: Any) -> Any:
            raise self.error

        return fail


@pytest.fixture
async def failing() -> AsyncIterator[tuple[TestClient, FailingBackend]]:
    backend = FailingBackend(RuntimeError("no error chosen"))
    client = TestClient(TestServer(create_app(GatewaySettings(), backend)))  # type: ignore[arg-type]
    await client.start_server()
    yield client, backend
    await client.close()


@pytest.mark.parametrize("path", ["/nope", "/v1/queue", "/v1/queues/q/messages/extra", "/v2/queues", "/"])
async def test_unknown_route_is_404_json(client: TestClient, path: str) -> None:
    await error_of(await client.get(path), 404, "not_found")


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/healthz", "GET"),
        ("PATCH", "/v1/queues/q", "DELETE, GET, PUT"),
        ("GET", "/v1/queues/q/messages", "POST"),
        ("PUT", "/v1/queues/q/groups/g/consumers/c/poll", "POST"),
    ],
)
async def test_wrong_method_is_405_json(client: TestClient, backend: RecordingBackend, method: str, path: str, allowed: str) -> None:
    r = await client.request(method, path)
    err = await error_of(r, 405, "method_not_allowed")
    assert ", ".join(err["allowed"]) == allowed
    assert r.headers["Allow"] == allowed
    assert backend.calls == []


async def test_backend_errors_pass_through_with_details(failing: tuple[TestClient, FailingBackend]) -> None:
    client, backend = failing
    backend.error = Conflict("not_owner", "another read node owns the group", owner="r2")
    err = await error_of(await client.get("/v1/queues"), 409, "not_owner")
    assert err["owner"] == "r2"


@pytest.mark.parametrize(
    ("exc", "status", "retry_after"),
    [
        (Overloaded(message="slow down", retry_after=2.5), 429, "3"),
        (Overloaded(status=503, retry_after=1), 503, "1"),
        (Unavailable("stale_map", "map moved", retry_after=0.25), 503, "1"),
    ],
)
async def test_retryable_errors_carry_retry_after(
    failing: tuple[TestClient, FailingBackend], exc: Exception, status: int, retry_after: str
) -> None:
    client, backend = failing
    backend.error = exc
    r = await client.post("/v1/queues/q/messages", json={"messages": [{"value": 1}]})
    err = await error_of(r, status)
    assert r.headers["Retry-After"] == retry_after
    assert err["retry_after"] > 0


async def test_a_bug_is_a_logged_500_json(failing: tuple[TestClient, FailingBackend], caplog: pytest.LogCaptureFixture) -> None:
    client, backend = failing
    backend.error = KeyError("secret internals")
    with caplog.at_level(logging.ERROR, logger="vpq.gateway.middleware"):
        r = await client.get("/v1/queues/q")
    err = await error_of(r, 500, "internal_error")
    assert "secret" not in err["message"]
    assert any("unhandled error" in rec.message and rec.exc_info for rec in caplog.records)


async def test_backend_answering_the_wrong_number_of_results_is_a_500(failing: tuple[TestClient, FailingBackend]) -> None:
    client, backend = failing

    async def short(queue: str, messages: list) -> list:
        return []

    backend.produce = short  # type: ignore[method-assign]
    await error_of(await client.post("/v1/queues/q/messages", json={"messages": [{"value": 1}]}), 500, "internal_error")


async def test_request_metrics_label_routes_by_template(client: TestClient) -> None:
    await client.get("/v1/queues/a")
    await client.get("/v1/queues/b")
    await client.get("/some/random/path")
    text = await (await client.get("/metrics")).text()
    assert 'vpq_gateway_requests_total{method="GET",route="/v1/queues/{queue}",status="404"} 2.0' in text
    assert 'vpq_gateway_requests_total{method="GET",route="unmatched",status="404"} 1.0' in text
    assert "/v1/queues/a" not in text
