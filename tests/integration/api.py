"""A thin synchronous HTTP helper for integration tests: exact paths and bodies of API.md."""

from __future__ import annotations

import time
import uuid
from typing import Any

import requests


class Api:
    def __init__(self, base_url: str) -> None:
        self.base = base_url
        self.s = requests.Session()

    def call(self, method: str, path: str, body: Any = None, headers: dict | None = None, expect: int | None = 200):
        r = self.s.request(method, self.base + path, json=body, headers=headers, timeout=60)
        if expect is not None:
            assert r.status_code == expect, f"{method} {path} -> {r.status_code} {r.text}"
        return r

    def put_queue(self, name: str, **config: Any) -> dict:
        r = self.call("PUT", f"/v1/queues/{name}", config, expect=None)
        assert r.status_code in (200, 201), r.text
        return r.json()

    def produce(self, queue: str, messages: list[dict], headers: dict | None = None) -> list[dict]:
        return self.call("POST", f"/v1/queues/{queue}/messages", {"messages": messages}, headers).json()["results"]

    def join(self, queue: str, group: str, *, retry_s: float = 15.0, **body: Any) -> str:
        """Join, retrying a 503 (e.g. ``group_moving`` while a restarted platform's old read
        node registration has not expired) after its ``retry_after``, as a client
        following API.md does, for up to ``retry_s``."""
        path = f"/v1/queues/{queue}/groups/{group}/consumers"
        deadline = time.monotonic() + retry_s
        while True:
            r = self.call("POST", path, body, expect=None)
            if r.status_code != 503 or time.monotonic() >= deadline:
                assert r.status_code == 200, f"POST {path} -> {r.status_code} {r.text}"
                return r.json()["consumer_id"]
            time.sleep(min(float(r.json()["error"].get("retry_after") or 0.2), 1.0))

    def poll(self, queue: str, group: str, cid: str, max_messages: int = 100, wait_ms: int = 0) -> list[dict]:
        body = {"max_messages": max_messages, "wait_ms": wait_ms}
        return self.call("POST", f"/v1/queues/{queue}/groups/{group}/consumers/{cid}/poll", body).json()["messages"]

    def ack(self, queue: str, group: str, cid: str, ids: list[str]) -> int:
        return self.call("POST", f"/v1/queues/{queue}/groups/{group}/consumers/{cid}/ack", {"ids": ids}).json()["acked"]

    def nack(self, queue: str, group: str, cid: str, ids: list[str], delay_ms: int = 0) -> int:
        body = {"ids": ids, "delay_ms": delay_ms}
        return self.call("POST", f"/v1/queues/{queue}/groups/{group}/consumers/{cid}/nack", body).json()["nacked"]

    def leave(self, queue: str, group: str, cid: str) -> None:
        r = self.call("DELETE", f"/v1/queues/{queue}/groups/{group}/consumers/{cid}", expect=None)
        assert r.status_code in (200, 204), r.text

    def group(self, queue: str, group: str) -> dict:
        return self.call("GET", f"/v1/queues/{queue}/groups/{group}").json()

    def cluster(self) -> dict:
        return self.call("GET", "/v1/cluster").json()

    def end_offsets(self) -> dict[int, int]:
        return {p["id"]: p["end_offset"] for p in self.cluster()["physical_partitions"]}


class OrderChecker:
    """Per-key order as DESIGN.md states it: a message is delivered only when every earlier
    message with the same key (and context) is acknowledged or came just before it in the
    same poll (a run). Feed it every delivery, with the poll's batch it came in, and every
    ack, in the order they happened."""

    def __init__(self) -> None:
        self.produced: dict[str, list[str]] = {}  # key -> ids in produce order
        self.acked: set[str] = set()
        self.violations: list[str] = []
        self._poll: object = None
        self._in_poll: set[str] = set()

    def produced_in_order(self, key: str, msg_id: str) -> None:
        self.produced.setdefault(key, []).append(msg_id)

    def delivered(self, key: str, msg_id: str, poll: object = None) -> None:
        """``poll``: the batch the message came in (the same object for every message of
        one poll; None: a poll of its own)."""
        if poll is None or poll is not self._poll:
            self._poll = poll
            self._in_poll = set()
        for earlier in self.produced.get(key, []):
            if earlier == msg_id:
                break
            if earlier not in self.acked and earlier not in self._in_poll:
                self.violations.append(f"{msg_id} (key {key}) delivered while {earlier} unacked")
                break
        self._in_poll.add(msg_id)

    def ack(self, ids: list[str]) -> None:
        self.acked.update(ids)


def unique_name(prefix: str) -> str:
    """A queue or group name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
