"""One request to a node's internal HTTP API (``call_node``) and the errors it maps.

Contract of every call:

- 2xx: a ``NodeAnswer`` (status, headers, raw body); ``NodeAnswer.json()`` decodes it (a
  body that is not JSON is a 500 ``bad_node_answer``, as is any malformed answer the
  clients find).
- 4xx/5xx: the node's ``common.errors`` JSON is rebuilt with ``VpqError.from_dict`` into
  the same exception type, code, message and details, so a node's error reaches the user
  unchanged through the gateway. A body that is not that JSON becomes a ``VpqError`` with
  code ``http_<status>`` (class by status, e.g. 503 -> ``Unavailable``). A node refusing
  the caller's cluster secret (401 ``cluster_secret_required`` / ``bad_cluster_secret``,
  ``node_rpc.cluster_auth``) is a misconfigured cluster, not the user's fault: a 500
  ``InternalError`` with code ``cluster_secret_mismatch`` naming the node.
- The node cannot be reached (connection refused or reset, timeout, truncated answer):
  ``Unavailable`` (503, retryable, ``retry_after`` 1 s) with code ``node_unreachable`` and
  details ``role`` and ``node`` (the address), naming the node in its message. An append
  that timed out may or may not have been appended (at-least-once: a retry may duplicate).

The caller owns the ``aiohttp.ClientSession`` (one per process, shared by all clients),
made by ``node_session``: no cap on connections per node, since some calls wait on the
node by design (a consumer's long poll, up to its ``wait_ms``; a tailer's read), and a
capped pool would make every other call to that node (a join, an ack) queue behind them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDictProxy

from vpq.common.errors import InternalError, Unavailable, VpqError
from vpq.node_rpc.cluster_auth import BAD_CLUSTER_SECRET, CLUSTER_SECRET_REQUIRED

NODE_UNREACHABLE = "node_unreachable"
"""Code of the ``Unavailable`` raised when a node cannot be reached."""

BAD_NODE_ANSWER = "bad_node_answer"
"""Code of the ``InternalError`` raised when a node answers 2xx with a malformed body."""

CLUSTER_SECRET_MISMATCH = "cluster_secret_mismatch"
"""Code of the ``InternalError`` raised when a node refuses the caller's cluster secret."""

SECRET_REFUSALS = (CLUSTER_SECRET_REQUIRED, BAD_CLUSTER_SECRET)

MAX_WAIT_MS = 30_000
"""Longest wait (ms) a node's long poll or read accepts; a longer one is capped."""

_CONNECTION_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError)


def node_session(headers: Mapping[str, str] | None = None) -> aiohttp.ClientSession:
    """A session for calling nodes, sending ``headers`` on every call: each call in flight
    has a connection of its own (no cap, per node or in all: calls never wait for one),
    idle ones are kept alive for the next calls. Call from a running event loop."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, limit_per_host=0), headers=dict(headers or {})
    )


@dataclass(frozen=True, slots=True)
class NodeAnswer:
    """A 2xx answer of a node: status, headers and the raw body."""

    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON (``bad_node_answer`` when it is not)."""
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            raise InternalError(BAD_NODE_ANSWER, "a node answered with a body that is not JSON") from None


def error_from_answer(status: int, body: bytes, role: str, address: str) -> VpqError:
    """The exception a non-2xx answer stands for (see the module docstring)."""
    try:
        data = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, Mapping) and isinstance(data.get("error"), Mapping):
        if status == 401 and data["error"].get("code") in SECRET_REFUSALS:
            return InternalError(
                CLUSTER_SECRET_MISMATCH,
                f"{role} node {address} refused this process's cluster secret ({data['error']['code']})",
                role=role,
                node=address,
            )
        return VpqError.from_dict(data, status)
    err = VpqError.from_dict({}, status)
    err.message = f"{role} node {address} answered HTTP {status} without an error body"
    err.args = (err.message,)
    return err


def unreachable(role: str, address: str, exc: BaseException) -> Unavailable:
    """The ``Unavailable`` for a node that could not be reached."""
    reason = str(exc) or type(exc).__name__
    return Unavailable(
        NODE_UNREACHABLE,
        f"{role} node {address} is unreachable: {reason}",
        retry_after=1.0,
        role=role,
        node=address,
    )


async def call_node(
    session: aiohttp.ClientSession,
    method: str,
    address: str,
    path: str,
    *,
    role: str,
    timeout_s: float,
    json_body: Any = None,
    data: bytes | None = None,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> NodeAnswer:
    """One request to ``http://{address}{path}``; raises as the module docstring says."""
    send_headers = dict(headers or {})
    body: bytes | None = data
    if json_body is not None:
        body = orjson.dumps(json_body)
        send_headers["Content-Type"] = "application/json"
    elif data is not None:
        send_headers.setdefault("Content-Type", "application/octet-stream")
    try:
        async with session.request(
            method,
            f"http://{address}{path}",
            data=body,
            params=params,
            headers=send_headers,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            raw = await resp.read()
            status = resp.status
            resp_headers = resp.headers
    except _CONNECTION_ERRORS as exc:
        raise unreachable(role, address, exc) from exc
    if status >= 400:
        raise error_from_answer(status, raw, role, address)
    return NodeAnswer(status, resp_headers, raw)
