"""Every bad input of API.md gets its 4xx JSON error and appends nothing (real platform)."""

from __future__ import annotations

import pytest

from tests.integration.api import unique_name

pytestmark = pytest.mark.integration


def _err(r, status: int) -> dict:
    assert r.status_code == status, f"{r.status_code} {r.text}"
    body = r.json()
    assert set(body["error"]) >= {"code", "message"}, body
    return body["error"]


def test_bad_inputs_are_rejected_and_change_nothing(api, platform):
    q = unique_name("bad")
    api.put_queue(q, max_message_bytes=1024)
    cid = api.join(q, "g")
    before = api.end_offsets()
    base = f"/v1/queues/{q}/messages"
    s = api.s
    cases = [
        (s.post(api.base + base, data=b"{not json", headers={"Content-Type": "application/json"}), 400),
        (s.post(api.base + base, data=b"{}", headers={"Content-Type": "text/plain"}), 415),
        (s.post(api.base + base, json={}), 400),
        (s.post(api.base + base, json={"messages": []}), 400),
        (s.post(api.base + base, json={"messages": [{"key": "k"}]}), 400),
        (s.post(api.base + base, json={"messages": [{"value": 1, "value_b64": "AA=="}]}), 400),
        (s.post(api.base + base, json={"messages": [{"value_b64": "***"}]}), 400),
        (s.post(api.base + base, json={"messages": [{"value": 1, "lane": "Bad Lane"}]}), 400),
        (s.post(api.base + base, json={"messages": [{"value": 1}]}, headers={"X-Env": "UPPER"}), 400),
        (s.post(api.base + base, json={"messages": [{"value": "x" * 2000}]}), 413),
        (s.post(api.base + "/v1/queues/no-such-queue/messages", json={"messages": [{"value": 1}]}), 404),
        (s.post(api.base + "/v1/queues/bad name!/messages", json={"messages": [{"value": 1}]}), 400),
        (s.put(api.base + f"/v1/queues/{q}", json={"virtual_partitions": 3}), 400),
        (s.put(api.base + f"/v1/queues/{q}", json={"virtual_partitions": 8}), 409),  # may only grow: 16 -> 8
        (s.put(api.base + f"/v1/queues/{q}", json={"ordering": "sometimes"}), 400),
        (s.post(api.base + f"/v1/queues/{q}/groups/g/consumers", json={"start": "middle"}), 400),
        (s.post(api.base + f"/v1/queues/{q}/groups/g/consumers/{cid}/poll", json={"max_messages": 0}), 400),
        (s.post(api.base + f"/v1/queues/{q}/groups/g/consumers/{cid}/poll", json={"max_messages": 1001}), 400),
        (s.post(api.base + f"/v1/queues/{q}/groups/g/consumers/{cid}/poll", json={"wait_ms": 30001}), 400),
        (s.post(api.base + f"/v1/queues/{q}/groups/g/consumers/nobody/poll", json={}), 404),
        (s.post(api.base + f"/v1/queues/{q}/groups/g/consumers/{cid}/ack", json={"ids": "x"}), 400),
        (s.post(api.base + f"/v1/queues/{q}/groups/g/consumers/{cid}/nack", json={"ids": [], "delay_ms": -1}), 400),
        (s.get(api.base + "/v1/queues/no-such-queue"), 404),
        (s.post(api.base + base, data=b"x" * (20 * 1024 * 1024), headers={"Content-Type": "application/json"}), 413),
    ]
    for i, (r, status) in enumerate(cases):
        try:
            _err(r, status)
        except AssertionError as exc:
            raise AssertionError(f"case {i}: {exc}") from None
    # a batch with one bad message names its index and appends nothing
    r = s.post(api.base + base, json={"messages": [{"value": 1}, {"value": 2}, {"value_b64": "@@"}]})
    assert _err(r, 400).get("index") == 2
    assert api.end_offsets() == before
    assert api.call("GET", f"/v1/queues/{q}").json()["virtual_partitions"] == 16
    assert api.poll(q, "g", cid, wait_ms=200) == []
