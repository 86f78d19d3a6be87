"""Bearer tokens with scopes on queue-name patterns (auth enabled), and auth disabled."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient

from tests.gateway.conftest import MakeClient, RecordingBackend, error_of
from vpq.common.errors import Forbidden, Unauthorized
from vpq.config.settings import AuthToken, GatewaySettings
from vpq.gateway.auth import Authorizer
from vpq.gateway.routes import ROUTES
from vpq.gateway.routes_spec import Access

TOKENS = [
    AuthToken(token="prod-tok", scopes={"produce": ["orders*"]}),
    AuthToken(token="cons-tok", scopes={"consume": ["orders", "orders.*"]}),
    AuthToken(token="team-admin", scopes={"admin": ["team-*"]}),
    AuthToken(token="root", scopes={"admin": ["*"], "produce": ["*"], "consume": ["*"]}),
]
AUTH = GatewaySettings(auth_enabled=True, tokens=TOKENS)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
async def secured(make_client: MakeClient, backend: RecordingBackend) -> TestClient:
    client = await make_client(AUTH)
    for name in ("orders", "team-a", "other"):
        assert (await client.put(f"/v1/queues/{name}", headers=bearer("root"))).status == 201
    backend.calls.clear()
    return client


async def test_no_token_is_401_with_www_authenticate(secured: TestClient, backend: RecordingBackend) -> None:
    r = await secured.post("/v1/queues/orders/messages", json={"messages": [{"value": 1}]})
    await error_of(r, 401, "unauthorized")
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert backend.calls == []


@pytest.mark.parametrize("header", ["Bearer nope", "Basic cm9vdDpyb290", "Bearer", "root", "Bearer  "])
async def test_invalid_token_is_401(secured: TestClient, backend: RecordingBackend, header: str) -> None:
    r = await secured.get("/v1/queues/orders", headers={"Authorization": header})
    err = await error_of(r, 401)
    assert err["code"] in ("unauthorized", "invalid_token")
    assert "WWW-Authenticate" in r.headers
    assert backend.calls == []


async def test_scheme_is_case_insensitive(secured: TestClient) -> None:
    assert (await secured.get("/v1/queues/orders", headers={"Authorization": "bearer root"})).status == 200


async def test_produce_scope(secured: TestClient, backend: RecordingBackend) -> None:
    body = {"messages": [{"value": 1}]}
    assert (await secured.post("/v1/queues/orders/messages", json=body, headers=bearer("prod-tok"))).status == 200
    err = await error_of(await secured.post("/v1/queues/other/messages", json=body, headers=bearer("prod-tok")), 403, "forbidden")
    assert err["scope"] == "produce"
    await error_of(await secured.post("/v1/queues/orders/messages", json=body, headers=bearer("cons-tok")), 403, "forbidden")
    await error_of(await secured.post("/v1/queues/orders/messages", json=body, headers=bearer("team-admin")), 403, "forbidden")
    assert [n for n, _ in backend.calls] == ["produce"]


async def test_consume_scope_covers_consumer_endpoints_and_group_info(secured: TestClient) -> None:
    h = bearer("cons-tok")
    r = await secured.post("/v1/queues/orders/groups/g/consumers", json={}, headers=h)
    assert r.status == 200
    cid = (await r.json())["consumer_id"]
    base = f"/v1/queues/orders/groups/g/consumers/{cid}"
    assert (await secured.post(base + "/poll", json={}, headers=h)).status == 200
    assert (await secured.post(base + "/ack", json={"ids": []}, headers=h)).status == 200
    assert (await secured.post(base + "/nack", json={"ids": []}, headers=h)).status == 200
    assert (await secured.get("/v1/queues/orders/groups/g", headers=h)).status == 200
    await error_of(await secured.post(base + "/poll", json={}, headers=bearer("prod-tok")), 403, "forbidden")
    await error_of(await secured.get("/v1/queues/other/groups/g", headers=h), 403, "forbidden")
    assert (await secured.delete(base, headers=h)).status == 204


async def test_admin_scope_on_patterns(secured: TestClient, backend: RecordingBackend) -> None:
    h = bearer("team-admin")
    assert (await secured.put("/v1/queues/team-b", json={}, headers=h)).status == 201
    assert (await secured.get("/v1/queues/team-a", headers=h)).status == 200
    await error_of(await secured.put("/v1/queues/orders", json={}, headers=h), 403, "forbidden")
    await error_of(await secured.delete("/v1/queues/orders", headers=h), 403, "forbidden")
    await error_of(await secured.get("/v1/queues/orders", headers=bearer("prod-tok")), 403, "forbidden")
    assert "orders" in [q["name"] for q in await backend.real.list_queues()]


async def test_cluster_and_maps_need_admin_on_star(secured: TestClient) -> None:
    for path in ("/v1/cluster", "/v1/maps/current"):
        await error_of(await secured.get(path), 401)
        await error_of(await secured.get(path, headers=bearer("team-admin")), 403, "forbidden")
        await error_of(await secured.get(path, headers=bearer("prod-tok")), 403, "forbidden")
        assert (await secured.get(path, headers=bearer("root"))).status == 200
    elect = "/v1/cluster/partitions/0/leader"
    await error_of(await secured.post(elect, json={"node": "w1"}), 401)
    await error_of(await secured.post(elect, json={"node": "w1"}, headers=bearer("team-admin")), 403, "forbidden")
    # the root token gets through auth: this platform is not replicated (R = 1)
    await error_of(await secured.post(elect, json={"node": "w0"}, headers=bearer("root")), 409, "not_replicated")


async def test_queue_list_is_filtered_to_visible_queues(secured: TestClient) -> None:
    async def names(token: str) -> list[str]:
        r = await secured.get("/v1/queues", headers=bearer(token))
        assert r.status == 200
        return [q["name"] for q in (await r.json())["queues"]]

    assert await names("root") == ["orders", "other", "team-a"]
    assert await names("prod-tok") == ["orders"]
    assert await names("team-admin") == ["team-a"]
    await error_of(await secured.get("/v1/queues"), 401)


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/openapi.json", "/docs"])
async def test_open_endpoints_need_no_token(secured: TestClient, path: str) -> None:
    assert (await secured.get(path)).status == 200


async def test_metrics_need_a_valid_token_of_any_scope(make_client: MakeClient) -> None:
    scraper = AuthToken(token="scrape", scopes={})
    client = await make_client(GatewaySettings(auth_enabled=True, tokens=[*TOKENS, scraper]))
    r = await client.get("/metrics")
    await error_of(r, 401, "unauthorized")
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    await error_of(await client.get("/metrics", headers=bearer("nope")), 401, "invalid_token")
    for token in ("scrape", "prod-tok", "root"):
        r = await client.get("/metrics", headers=bearer(token))
        assert r.status == 200, token
        assert "vpq_" in await r.text()


async def test_auth_comes_before_body_validation(secured: TestClient, backend: RecordingBackend) -> None:
    r = await secured.post("/v1/queues/orders/messages", data=b"{", headers={"Content-Type": "application/json"})
    await error_of(r, 401)
    r = await secured.post("/v1/queues/other/messages", data=b"{", headers={"Content-Type": "application/json", **bearer("prod-tok")})
    await error_of(r, 403)


async def test_disabled_by_default(client: TestClient) -> None:
    assert (await client.put("/v1/queues/x")).status == 201
    assert (await client.get("/v1/cluster", headers=bearer("whatever"))).status == 200


def test_every_non_open_route_declares_what_it_needs() -> None:
    by_op = {r.operation_id: r.access for r in ROUTES}
    assert by_op["produce"] is Access.PRODUCE
    assert {by_op[o] for o in ("joinGroup", "poll", "ack", "nack", "leaveGroup", "getGroup")} == {Access.CONSUME}
    assert {by_op[o] for o in ("putQueue", "getQueue", "deleteQueue")} == {Access.ADMIN}
    assert {by_op[o] for o in ("getCluster", "getCurrentMap", "electLeader")} == {Access.ADMIN_GLOBAL}
    assert by_op["listQueues"] is Access.ANY_TOKEN
    assert by_op["metrics"] is Access.VALID_TOKEN
    assert {by_op[o] for o in ("healthz", "readyz", "openapi", "docs")} == {Access.OPEN}
    for r in ROUTES:
        if r.access in (Access.PRODUCE, Access.CONSUME, Access.ADMIN):
            assert "queue" in r.path_params


def test_authorizer_unit() -> None:
    a = Authorizer(AUTH)
    tok = a.authenticate("Bearer prod-tok")
    assert tok.token == "prod-tok"
    assert a.allows(tok, "produce", "orders.eu") and not a.allows(tok, "produce", "Orders")
    assert a.can_see(tok, "orders") and not a.can_see(tok, "other")
    with pytest.raises(Unauthorized):
        a.authenticate(None)
    with pytest.raises(Unauthorized):
        a.authenticate("Bearer prod-tokX")
    spec = next(r for r in ROUTES if r.operation_id == "produce")
    with pytest.raises(Forbidden):
        a.check(spec, "Bearer cons-tok", "orders")


def test_bad_token_config_is_refused() -> None:
    with pytest.raises(ValueError):
        Authorizer(GatewaySettings(auth_enabled=True, tokens=[AuthToken(token="t", scopes={"write": ["*"]})]))
    with pytest.raises(ValueError):
        Authorizer(GatewaySettings(auth_enabled=True, tokens=[AuthToken(token="", scopes={})]))
