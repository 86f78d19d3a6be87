"""AsyncClient against the real gateway (a live platform, through a recording proxy):
request shapes, answers, errors, retries."""

from __future__ import annotations

import asyncio

import pytest
from yarl import URL

from tests.live_platform import LivePlatform
from tests.recording_proxy import RecordingProxy
from tests.sdk.conftest import RecordingSleep, read_back, values
from vpq.sdk.client import AsyncClient
from vpq.sdk.errors import (
    BadRequestError,
    ClientClosedError,
    ConflictError,
    GatewayConnectionError,
    NotFoundError,
    PayloadTooLargeError,
    UnavailableError,
)
from vpq.sdk.models import Message, ProduceMessage
from vpq.sdk.retry import RetryPolicy


async def poll_until(client: AsyncClient, queue: str, group: str, cid: str, n: int) -> list[Message]:
    """Poll (long polls) until ``n`` messages came; more is a failure."""
    out: list[Message] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while len(out) < n and loop.time() < deadline:
        out += await client.poll(queue, group, cid, max_messages=n - len(out), wait_ms=500)
    assert len(out) == n, out
    return out


async def test_queue_admin_round_trip(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    info = await client.put_queue(q, virtual_partitions=8, ordering="none", retention_ms=None)
    assert info["name"] == q and info["virtual_partitions"] == 8 and info["ordering"] == "none"
    put = gateway.requests_to("PUT", f"/v1/queues/{q}")[0]
    assert put.body == {"virtual_partitions": 8, "ordering": "none"}  # None left out
    assert put.headers["Content-Type"] == "application/json"
    await client.put_queue(q, virtual_partitions=16)
    assert (await client.get_queue(q))["virtual_partitions"] == 16
    assert q in [x["name"] for x in await client.list_queues()]
    await client.delete_queue(q)
    assert q not in [x["name"] for x in await client.list_queues()]


async def test_produce_request_shape_and_results(client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str) -> None:
    await client.put_queue(q)
    results = await client.produce(
        q,
        [ProduceMessage(value={"n": 1}, key="a"), {"value": b"\x00raw", "lane": "own"}, ProduceMessage(value="x")],
        lane="feat-a",
        env="test",
        set="",
    )
    req = gateway.requests_to("POST", f"/v1/queues/{q}/messages")[0]
    assert req.headers["X-Lane"] == "feat-a"
    assert req.headers["X-Env"] == "test"
    assert req.headers["X-Set"] == ""
    prefix = client.dedup_ids.prefix if client.dedup_ids is not None else None
    assert req.body == {
        "messages": [
            {"key": "a", "value": {"n": 1}, "dedup_id": f"{prefix}-0"},
            {"value_b64": "AHJhdw==", "lane": "own", "dedup_id": f"{prefix}-1"},
            {"value": "x", "dedup_id": f"{prefix}-2"},
        ]
    }
    stored = {m.id: m for m in await read_back(platform.url, q, 3, env="test")}
    assert set(stored) == {r.id for r in results}
    assert [(stored[r.id].value, stored[r.id].lane, stored[r.id].env) for r in results] == [
        ({"n": 1}, "feat-a", "test"), (b"\x00raw", "own", "test"), ("x", "feat-a", "test")
    ]
    placement = (await client.get_queue(q))["placement"]
    assert all(r.partition == placement[r.virtual_partition] for r in results)


async def test_produce_without_context_sends_no_isolation_headers(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    await client.put_queue(q)
    await client.produce(q, [ProduceMessage(value=1)])
    headers = gateway.requests_to("POST", "/messages")[0].headers
    assert not {"X-Lane", "X-Env", "X-Set"} & set(headers)


async def test_token_is_sent_as_bearer(server, gateway: RecordingProxy) -> None:  # type: ignore[no-untyped-def]
    async with AsyncClient(str(server.make_url("")), token="s3cret") as c:
        await c.list_queues()
    assert gateway.requests[0].headers["Authorization"] == "Bearer s3cret"


async def test_consume_cycle_request_shapes(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    await client.put_queue(q, virtual_partitions=1)  # one vp: delivered in produce order
    await client.produce(q, [ProduceMessage(value=i, key=f"k{i}") for i in range(3)], lane="feat-a", env="test", set="s1")
    joined = await client.join(q, "g", lane="feat-a", env="test", set="s1", start="earliest")
    assert joined.session_timeout_ms == 10000
    join_req = gateway.requests_to("POST", f"/v1/queues/{q}/groups/g/consumers")[0]
    assert join_req.body == {"lane": "feat-a", "env": "test", "set": "s1", "start": "earliest"}
    cid = joined.consumer_id
    msgs = await client.poll(q, "g", cid, max_messages=2, wait_ms=5000)
    assert [m.value for m in msgs] == [0, 1] and msgs[0].key == "k0" and msgs[0].delivery_count == 1
    assert gateway.requests_to("POST", f"/consumers/{cid}/poll")[0].body == {"max_messages": 2, "wait_ms": 5000}
    assert await client.ack(q, "g", cid, [msgs[0].id]) == 1
    assert gateway.requests_to("POST", f"/consumers/{cid}/ack")[0].body == {"ids": [msgs[0].id]}
    assert await client.nack(q, "g", cid, [msgs[1].id], delay_ms=250) == 1
    assert gateway.requests_to("POST", f"/consumers/{cid}/nack")[0].body == {"ids": [msgs[1].id], "delay_ms": 250}
    again = await poll_until(client, q, "g", cid, 2)
    assert sorted((m.value, m.delivery_count) for m in again) == [(1, 2), (2, 1)]
    info = await client.group(q, "g")
    assert info["members"][0]["consumer_id"] == cid and info["lag"]["total"] == 2
    await client.leave(q, "g", cid)
    assert gateway.requests_to("DELETE", f"/consumers/{cid}")
    with pytest.raises(NotFoundError) as exc:
        await client.poll(q, "g", cid)
    assert exc.value.code == "consumer_not_found"


async def test_cluster_map_and_health(client: AsyncClient, gateway: RecordingProxy, q: str) -> None:
    await client.put_queue(q, virtual_partitions=4)
    cluster = await client.cluster()
    assert [n["id"] for n in cluster["write_nodes"]] == ["w0"] and len(cluster["physical_partitions"]) == 4
    current = await client.current_map()
    assert current["epoch"] == cluster["epoch"]
    placement = (await client.get_queue(q))["placement"]
    assert current["queues"][q] == {"virtual_partitions": 4, "placement": placement}
    assert len(placement) == 4 and set(placement) <= {0, 1, 2, 3}
    assert await client.healthz() is True
    assert await client.readyz() is True
    gateway.fail("GET", r"^/readyz$", 503, "not_ready", message="nodes joining", times=1)
    assert await client.readyz() is False
    assert len(gateway.requests_to("GET", "/readyz")) == 2  # probes are never retried


async def test_error_mapping_404_409_413(client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str) -> None:
    with pytest.raises(NotFoundError) as nf:
        await client.get_queue(f"{q}-missing")
    assert nf.value.status == 404 and nf.value.code == "queue_not_found" and f"{q}-missing" in nf.value.message
    await client.put_queue(q, virtual_partitions=8, max_message_bytes=64)
    with pytest.raises(ConflictError) as cf:
        await client.put_queue(q, virtual_partitions=4)
    assert cf.value.code == "virtual_partitions_shrink" and cf.value.details == {"field": "virtual_partitions"}
    with pytest.raises(PayloadTooLargeError) as big:
        await client.produce(q, [ProduceMessage(value="ok"), ProduceMessage(value="x" * 100)])
    assert big.value.details["index"] == 1 and big.value.code == "message_too_large"
    # none of these were retried
    assert len(gateway.requests) == 4
    assert await read_back(platform.url, q, 0) == []  # all or nothing


async def test_retry_on_503_honours_retry_after_then_succeeds(
    client: AsyncClient, gateway: RecordingProxy, sleeps: RecordingSleep, platform: LivePlatform, q: str
) -> None:
    await client.put_queue(q)
    gateway.fail("POST", r"/messages$", 503, "overloaded", retry_after="2", times=2)
    results = await client.produce(q, [ProduceMessage(value=1)])
    assert len(results) == 1
    assert len(gateway.requests_to("POST", "/messages")) == 3
    assert sleeps.delays == [2.0, 2.0]
    assert await values(platform.url, q, 1) == [1]


async def test_retry_without_retry_after_uses_backoff_and_gives_up(
    client: AsyncClient, gateway: RecordingProxy, sleeps: RecordingSleep
) -> None:
    gateway.fail("GET", r"^/v1/cluster$", 429, "rate_limited", times=10)
    with pytest.raises(Exception) as exc:
        await client.cluster()
    assert exc.value.retryable and exc.value.status == 429  # type: ignore[attr-defined]
    assert len(gateway.requests_to("GET", "/v1/cluster")) == 4  # attempts=4
    assert len(sleeps.delays) == 3 and all(0 < d <= 2.0 for d in sleeps.delays)


async def test_no_retry_on_400(client: AsyncClient, gateway: RecordingProxy, sleeps: RecordingSleep, q: str) -> None:
    await client.put_queue(q)
    with pytest.raises(BadRequestError) as exc:
        await client.produce(q, [{"value": 1}, {"key": "no value"}])
    assert exc.value.code == "invalid_message" and exc.value.details["index"] == 1
    assert len(gateway.requests_to("POST", "/messages")) == 1
    assert sleeps.delays == []


async def test_single_attempt_policy_raises_the_retryable_error(server, gateway: RecordingProxy) -> None:  # type: ignore[no-untyped-def]
    gateway.fail("GET", r"^/v1/cluster$", 503, "down", times=1)
    async with AsyncClient(str(server.make_url("")), retry=RetryPolicy(attempts=1)) as c:
        with pytest.raises(UnavailableError) as exc:
            await c.cluster()
        assert exc.value.retryable and exc.value.code == "down"
        assert [n["id"] for n in (await c.cluster())["write_nodes"]] == ["w0"]


async def test_connection_refused_is_retryable_connection_error(dead_url: str, sleeps: RecordingSleep) -> None:
    async with AsyncClient(dead_url, retry=RetryPolicy(attempts=3), sleep=sleeps) as c:
        with pytest.raises(GatewayConnectionError) as exc:
            await c.list_queues()
        assert exc.value.retryable and exc.value.status is None
        assert dead_url in exc.value.message
        assert len(sleeps.delays) == 2
        assert await c.healthz() is False


async def test_closed_client_refuses_calls(client: AsyncClient) -> None:
    await client.close()
    with pytest.raises(ClientClosedError):
        await client.list_queues()


async def test_request_urls_are_parsed_once_per_path_and_the_cache_is_bounded(
    client: AsyncClient, gateway: RecordingProxy, platform: LivePlatform, q: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vpq.sdk.client as client_module

    monkeypatch.setattr(client_module, "URL_CACHE_SIZE", 3)
    names = [f"{q}.1", f"{q}_2", f"{q}e", f"{q}f"]
    for name in names:
        await client.put_queue(name, virtual_partitions=1)
    for name in names:
        await client.produce(name, [ProduceMessage(value=1)])
        await client.produce(name, [ProduceMessage(value=2)])
    assert [await values(platform.url, name, 2) for name in names] == [[1, 2]] * 4
    posted = [r.path for r in gateway.requests if r.method == "POST"]
    assert posted == [p for name in names for p in [f"/v1/queues/{name}/messages"] * 2]
    first = client._url(f"/v1/queues/{q}e/messages")
    assert client._url(f"/v1/queues/{q}e/messages") is first  # parsed once, kept
    assert len(client._urls) <= 3


@pytest.mark.parametrize("base", ["http://gw.example:8080", "http://gw.example:8080/", "https://gw.example/vpq/api/"])
async def test_request_urls_join_the_base_as_a_full_parse_would(base: str) -> None:
    client = AsyncClient(base)
    try:
        for path in ("/v1/queues/orders.eu-1/messages", "/v1/queues/a%2Fb%20c/groups/g_1/consumers", "/v1/cluster"):
            built = client._url(path)
            assert built == URL(base.rstrip("/") + path)
            assert str(built) == base.rstrip("/") + path  # quoted segments stay as sent
        assert client._url("/v1/queues?prefix=x").query == {"prefix": "x"}  # a query still parses
    finally:
        await client.close()
