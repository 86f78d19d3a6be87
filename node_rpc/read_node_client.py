"""Client of the read-node internal HTTP API (``docs/internals.md``, "Read node").

The calls mirror the public consumer endpoints one to one, with the isolation context
already resolved (every field explicit). Errors follow ``node_rpc.call.call_node``:
a node's ``common.errors`` JSON comes back as the same exception (e.g. 409 ``not_owner``
with detail ``owner`` when another read node holds the group's lease, 404
``consumer_not_found``); an unreachable node is ``Unavailable`` with code
``node_unreachable``. A poll is bounded by its ``wait_ms`` plus ``poll_margin_s``, every
other call by ``timeout_s``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
import orjson

from vpq.common.errors import InternalError
from vpq.common.poll_body import PolledBody
from vpq.node_rpc.call import BAD_NODE_ANSWER, MAX_WAIT_MS, call_node
from vpq.node_rpc.node_pools import NodePools

MESSAGE_COUNT_HEADER = "X-Vpq-Messages"
"""On a poll answer: how many messages its body holds (so the gateway can pass the body
through without parsing it)."""
ACKED_COUNT_HEADER = "X-Vpq-Acked"
"""On a poll answer: how many of the poll's ``ack`` ids were acknowledged."""


def _seg(name: str) -> str:
    return quote(name, safe="")


def _group_path(queue: str, group: str) -> str:
    return f"/internal/v1/queues/{_seg(queue)}/groups/{_seg(group)}"


def _parse_answer(body: bytes, address: str) -> Any:
    """A node's answer body as JSON (``bad_node_answer`` when it is not JSON)."""
    try:
        return orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        raise InternalError(BAD_NODE_ANSWER, f"read node {address} answered with a body that is not JSON") from None


def _dict(obj: Any, address: str, what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise InternalError(BAD_NODE_ANSWER, f"read node {address} answered {what} with a non-object")
    return obj


def _count(obj: Any, name: str, address: str) -> int:
    value = obj.get(name) if isinstance(obj, dict) else None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InternalError(BAD_NODE_ANSWER, f"read node {address} answered without the integer {name!r}")
    return value


def _message_count(raw: str | None) -> int | None:
    if raw is None or not raw.isascii() or not raw.isdigit():
        return None
    return int(raw)


class ReadNodeClient:
    """Calls the read-node endpoints; the caller owns ``session``."""

    ROLE = "read"

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        timeout_s: float = 10.0,
        poll_margin_s: float = 10.0,
        pools: NodePools | None = None,
    ) -> None:
        self._session = session
        self._pools = pools
        """polls (the hot call) go over these lean connections when given"""
        self._timeout_s = timeout_s
        self._poll_margin_s = poll_margin_s
        self.redrive_timeout_s = 120.0

    async def _call(
        self, method: str, address: str, path: str, body: Any = None, timeout_s: float | None = None
    ) -> Any:
        answer = await call_node(
            self._session,
            method,
            address,
            path,
            role=self.ROLE,
            timeout_s=self._timeout_s if timeout_s is None else timeout_s,
            json_body=body,
        )
        return answer.json() if answer.body else None

    async def join(
        self,
        address: str,
        queue: str,
        group: str,
        *,
        consumer_id: str | None,
        env: str,
        set_: str,
        lane: str,
        start: Literal["earliest", "latest"] = "earliest",
    ) -> dict[str, Any]:
        """Join (or re-join) the group: ``{"consumer_id", "session_timeout_ms"}``."""
        body = {"consumer_id": consumer_id, "env": env, "set": set_, "lane": lane, "start": start}
        obj = await self._call("POST", address, f"{_group_path(queue, group)}/consumers", body)
        return _dict(obj, address, "join")

    async def poll(
        self, address: str, queue: str, group: str, consumer_id: str, max_messages: int, wait_ms: int,
        ack: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        """Acknowledge ``ack`` first (as ``ack``), then heartbeat and deliver up to
        ``max_messages`` messages (public message objects)."""
        polled = await self._poll(address, queue, group, consumer_id, max_messages, wait_ms, ack)
        return self._messages(_parse_answer(polled.body, address), address)

    async def poll_body(
        self, address: str, queue: str, group: str, consumer_id: str, max_messages: int, wait_ms: int,
        ack: Sequence[str] = (),
    ) -> PolledBody:
        """``poll``, its answer left encoded: the read node's body as it came (it is the
        public answer) and its message count, from the node's ``X-Vpq-Messages`` header;
        parsed and checked only when a node answers without that header. ``acked``: from
        the node's ``X-Vpq-Acked`` header (0 without it)."""
        polled = await self._poll(address, queue, group, consumer_id, max_messages, wait_ms, ack)
        if polled.count >= 0:
            return polled
        messages = self._messages(_parse_answer(polled.body, address), address)
        return PolledBody(polled.body, len(messages), polled.acked)

    async def _poll(
        self, address: str, queue: str, group: str, consumer_id: str, max_messages: int, wait_ms: int,
        ack: Sequence[str] = (),
    ) -> PolledBody:
        """The raw poll answer; ``count`` -1 when the node sent no usable count header."""
        wait = max(0, min(int(wait_ms), MAX_WAIT_MS))
        body: dict[str, Any] = {"max_messages": int(max_messages), "wait_ms": wait}
        if ack:
            body["ack"] = list(ack)
        path = f"{_group_path(queue, group)}/consumers/{_seg(consumer_id)}/poll"
        timeout_s = wait / 1000.0 + self._poll_margin_s
        if self._pools is not None:
            answer = await self._pools.call(
                "POST", address, path, role=self.ROLE, timeout_s=timeout_s, data=orjson.dumps(body),
                content_type=b"application/json",
            )
        else:
            answer = await call_node(
                self._session, "POST", address, path, role=self.ROLE, timeout_s=timeout_s, json_body=body
            )
        count = _message_count(answer.headers.get(MESSAGE_COUNT_HEADER))
        acked = _message_count(answer.headers.get(ACKED_COUNT_HEADER)) if ack else None
        return PolledBody(answer.body, -1 if count is None else count, acked or 0)

    @staticmethod
    def _messages(obj: Any, address: str) -> list[dict[str, Any]]:
        messages = obj.get("messages") if isinstance(obj, dict) else None
        if not isinstance(messages, list):
            raise InternalError(BAD_NODE_ANSWER, f"read node {address} answered poll without a message list")
        return messages

    async def ack(self, address: str, queue: str, group: str, consumer_id: str, ids: list[str]) -> int:
        """Acknowledge ``ids``; how many were in flight for this consumer."""
        obj = await self._call(
            "POST", address, f"{_group_path(queue, group)}/consumers/{_seg(consumer_id)}/ack", {"ids": list(ids)}
        )
        return _count(obj, "acked", address)

    async def nack(
        self, address: str, queue: str, group: str, consumer_id: str, ids: list[str], delay_ms: int
    ) -> int:
        """Give ``ids`` back for redelivery after ``delay_ms``; how many were in flight."""
        obj = await self._call(
            "POST",
            address,
            f"{_group_path(queue, group)}/consumers/{_seg(consumer_id)}/nack",
            {"ids": list(ids), "delay_ms": int(delay_ms)},
        )
        return _count(obj, "nacked", address)

    async def leave(self, address: str, queue: str, group: str, consumer_id: str) -> None:
        """Remove the consumer (its unacked messages go to others at once)."""
        await self._call("DELETE", address, f"{_group_path(queue, group)}/consumers/{_seg(consumer_id)}")

    async def group_info(self, address: str, queue: str, group: str) -> dict[str, Any]:
        """The public group answer (members and lag)."""
        obj = await self._call("GET", address, _group_path(queue, group))
        return _dict(obj, address, "group_info")

    async def delete_group(self, address: str, queue: str, group: str) -> None:
        """Delete the group with its members, delivery and ack state."""
        await self._call("DELETE", address, _group_path(queue, group))

    async def redrive(self, address: str, queue: str, group: str, max_messages: int | None) -> int:
        """Deliver the group's dead letters to it again (at most ``max_messages``, None:
        all); how many were redriven. A long redrive may take up to ``redrive_timeout_s``."""
        body = {} if max_messages is None else {"max_messages": int(max_messages)}
        obj = await self._call(
            "POST", address, f"{_group_path(queue, group)}/dlq/redrive", body, timeout_s=self.redrive_timeout_s
        )
        return _count(obj, "redriven", address)
