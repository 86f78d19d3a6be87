"""The blocking Client against the real gateway: same calls and errors as AsyncClient, from
plain (non-async) code."""

from __future__ import annotations

import threading

import pytest

from tests.sdk.conftest import ThreadedGateway
from vpq.sdk.errors import ClientClosedError, GatewayConnectionError, NotFoundError
from vpq.sdk.models import ProduceMessage
from vpq.sdk.retry import RetryPolicy
from vpq.sdk.sync import Client


def test_sync_client_full_cycle(threaded_gateway: ThreadedGateway, q: str) -> None:
    with Client(threaded_gateway.url) as c:
        assert c.healthz() and c.readyz()
        assert c.put_queue(q, virtual_partitions=1)["virtual_partitions"] == 1
        results = c.produce(q, [ProduceMessage(value="a", key="k"), {"value": b"\x00"}], lane="feat-a")
        assert len(results) == 2
        joined = c.join(q, "g", lane="feat-a")
        msgs = c.poll(q, "g", joined.consumer_id, max_messages=10, wait_ms=5000)  # one vp: one batch, in order
        assert [m.value for m in msgs] == ["a", b"\x00"]
        assert [m.lane for m in msgs] == ["feat-a", "feat-a"]
        assert c.ack(q, "g", joined.consumer_id, [msgs[0].id]) == 1
        assert c.nack(q, "g", joined.consumer_id, [msgs[1].id], delay_ms=5) == 1
        assert c.group(q, "g")["lag"]["total"] == 1
        c.leave(q, "g", joined.consumer_id)
        assert c.cluster()["epoch"] == c.current_map()["epoch"]
        assert c.current_map()["queues"][q]["placement"] == c.get_queue(q)["placement"]
        assert q in [x["name"] for x in c.list_queues()]
        with pytest.raises(NotFoundError):
            c.get_queue(f"{q}-nope")
        c.delete_queue(q)
    with pytest.raises(ClientClosedError):
        c.list_queues()
    c.close()  # idempotent


def test_sync_client_from_several_threads(threaded_gateway: ThreadedGateway, q: str) -> None:
    errors: list[BaseException] = []
    with Client(threaded_gateway.url) as c:
        c.put_queue(q)

        def work(n: int) -> None:
            try:
                for i in range(5):
                    c.produce(q, [ProduceMessage(value=[n, i])])
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert (c.get_queue(q)["traffic"]["messages_total"]) == 20


def test_sync_client_connection_error(dead_url: str) -> None:
    with Client(dead_url, retry=RetryPolicy(attempts=1)) as c:
        assert c.healthz() is False
        with pytest.raises(GatewayConnectionError):
            c.cluster()
