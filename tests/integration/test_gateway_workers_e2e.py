"""``vpq up --gateway-workers 2``: two gateway processes share the port; /metrics and
queue traffic add up both; a SIGKILLed worker is restarted while the other serves."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import requests

from tests.integration.api import Api
from tests.integration.conftest import FAST
from tests.integration.platform import Platform
from vpq.common.runfiles import gateway_workers_dir
from vpq.gateway.worker_peers import METRICS_PATH

pytestmark = pytest.mark.integration

QUEUE = "shared"
REQUESTS = 60


def _produce_new_connection(url: str, i: int, timeout_s: float = 30.0) -> None:
    """One produce request on a fresh connection (the kernel picks the worker per
    connection), retried on connection errors and 503s as a client does."""
    body = {"messages": [{"key": f"k{i}", "value": i}, {"key": f"k{i}", "value": -i}]}
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            r = requests.post(f"{url}/v1/queues/{QUEUE}/messages", json=body, timeout=10)
            if r.status_code == 200:
                return
            assert r.status_code == 503, r.text
        except requests.ConnectionError:
            pass
        assert time.monotonic() < deadline, "produce kept failing"
        time.sleep(0.1)


def _worker_files(p: Platform) -> dict[str, dict]:
    return {f.name: json.loads(f.read_text()) for f in gateway_workers_dir(p.data_dir).glob("*.json")}


def _own_requests(url: str, headers: dict[str, str]) -> float:
    text = requests.get(url + METRICS_PATH, headers=headers, timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("vpq_gateway_requests_total{") and 'route="/v1/queues/{queue}/messages"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _produced_totals(url: str) -> tuple[float, float]:
    """The gateway's produced messages of QUEUE and the backend's produce counter, each
    read from its one family in /metrics."""
    text = requests.get(url + "/metrics", timeout=10).text
    lines = text.splitlines()
    for family in ("vpq_gateway_produced_messages_total", "vpq_produce_messages_total", "vpq_cluster_map_epoch"):
        assert lines.count(f"# TYPE {family} " + ("gauge" if "epoch" in family else "counter")) == 1, family
    by_queue = [line for line in lines if line.startswith(f'vpq_gateway_produced_messages_total{{queue="{QUEUE}"}} ')]
    total = [line for line in lines if line.startswith("vpq_produce_messages_total ")]
    assert len(by_queue) == 1 and len(total) == 1
    return float(by_queue[0].rsplit(" ", 1)[1]), float(total[0].rsplit(" ", 1)[1])


def test_two_workers_share_the_port_and_answer_as_one_gateway(tmp_path):
    p = Platform(tmp_path / "vpq", physical_partitions=2, extra_args=["--gateway-workers", "2"], env=dict(FAST))
    p.start()
    try:
        gateways = p.children("vpq.gateway.main")
        assert len(gateways) == 2 and all("--worker" in g.cmdline() for g in gateways)
        api = Api(p.url)
        api.put_queue(QUEUE)
        for i in range(REQUESTS):
            _produce_new_connection(p.url, i)

        files = _worker_files(p)
        assert sorted(files) == ["0.json", "1.json"]
        shares = [_own_requests(f["url"], p.node_headers()) for f in files.values()]
        assert sum(shares) == REQUESTS and min(shares) > 0, shares  # both workers served
        for _ in range(4):  # whichever worker answers the scrape, the totals are the gateway's
            assert _produced_totals(p.url) == (2 * REQUESTS, 2 * REQUESTS)
        assert api.call("GET", f"/v1/queues/{QUEUE}").json()["traffic"]["messages_total"] == 2 * REQUESTS
        listed = {q["name"]: q for q in api.call("GET", "/v1/queues").json()["queues"]}
        assert listed[QUEUE]["traffic"]["messages_total"] == 2 * REQUESTS

        cid = api.join(QUEUE, "g")
        seen: list[int] = []
        deadline = time.monotonic() + 30
        while len(seen) < 2 * REQUESTS and time.monotonic() < deadline:
            batch = api.poll(QUEUE, "g", cid, max_messages=100, wait_ms=300)
            if batch:
                api.ack(QUEUE, "g", cid, [m["id"] for m in batch])
                seen.extend(m["value"] for m in batch)
        assert sorted(seen) == sorted([i for i in range(REQUESTS)] + [-i for i in range(REQUESTS)])

        victim = files["0.json"]["pid"]
        os.kill(victim, signal.SIGKILL)
        for i in range(REQUESTS, REQUESTS + 10):  # the other worker serves meanwhile
            _produce_new_connection(p.url, i)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            restarted = _worker_files(p).get("0.json", {}).get("pid")
            if restarted not in (None, victim) and len(p.children("vpq.gateway.main")) == 2:
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"worker 0 was not restarted:\n{p.output()}")
        assert requests.get(p.url + "/metrics", timeout=10).status_code == 200
    finally:
        rc = p.stop()
    assert rc == 0
