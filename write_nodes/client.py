"""Client side of the internal node HTTP API: the write-node calls, and the one request
helper every internal client shares (``call_node``).

Wire format: ``docs/internals.md`` ("Write node"). Contract of every call:

- 2xx: the decoded answer (shape checked; a malformed answer is a 500 ``bad_node_answer``).
- 4xx/5xx: the node's ``common.errors`` JSON is rebuilt with ``VpqError.from_dict`` into
  the same exception type, code, message and details, so a node's error reaches the user
  unchanged through the gateway. A body that is not that JSON becomes a ``VpqError`` with
  code ``http_<status>`` (class by status, e.g. 503 -> ``Unavailable``).
- The node cannot be reached (connection refused or reset, timeout, truncated answer):
  ``Unavailable`` (503, retryable, ``retry_after`` 1 s) with code ``node_unreachable`` and
  details ``role`` and ``node`` (the address), naming the node in its message. An append
  that timed out may or may not have been appended (at-least-once: a retry may duplicate).

The caller owns the ``aiohttp.ClientSession`` (one per process, shared by all clients).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from multidict import CIMultiDictProxy

from vpq.common.errors import InternalError, Unavailable, VpqError
from vpq.write_nodes.append_frames import Frame, encode_frames

NODE_UNREACHABLE = "node_unreachable"
"""Code of the ``Unavailable`` raised when a node cannot be reached."""

BAD_NODE_ANSWER = "bad_node_answer"
"""Code of the ``InternalError`` raised when a node answers 2xx with a malformed body."""

MAP_EPOCH_HEADER = "X-Map-Epoch"
START_OFFSET_HEADER = "X-Start-Offset"
END_OFFSET_HEADER = "X-End-Offset"
MAX_WAIT_MS = 30_000

_CONNECTION_ERRORS = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, asyncio.TimeoutError)


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


def _int_field(obj: Any, name: str) -> int:
    value = obj.get(name) if isinstance(obj, Mapping) else None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InternalError(BAD_NODE_ANSWER, f"a node's answer lacks the integer {name!r}")
    return value


def _int_header(headers: CIMultiDictProxy[str], name: str) -> int:
    raw = headers.get(name)
    try:
        return int(raw) if raw is not None else -1
    except ValueError:
        raise InternalError(BAD_NODE_ANSWER, f"a node sent a malformed {name} header") from None


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Raw batches read from a partition. ``start_offset`` is the log start, ``end_offset``
    the durable end (next offset to be written durably); ``data`` may be empty."""

    data: bytes
    start_offset: int
    end_offset: int


class WriteNodeClient:
    """Calls the write-node endpoints of ``docs/internals.md``.

    ``append_timeout_s`` bounds an append (it waits for the fsync); a read is bounded by
    its ``wait_ms`` plus ``read_margin_s``; ``partitions`` by ``admin_timeout_s``."""

    ROLE = "write"

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        append_timeout_s: float = 30.0,
        read_margin_s: float = 10.0,
        admin_timeout_s: float = 5.0,
    ) -> None:
        self._session = session
        self._append_timeout_s = append_timeout_s
        self._read_margin_s = read_margin_s
        self._admin_timeout_s = admin_timeout_s

    async def append(self, address: str, pp: int, batch: bytes, map_epoch: int) -> tuple[int, int]:
        """Append one record batch to partition ``pp``; ``(base_offset, last_offset)`` once
        durable (record i of the batch has offset ``base_offset + i``)."""
        answer = await call_node(
            self._session,
            "POST",
            address,
            f"/internal/v1/partitions/{int(pp)}/append",
            role=self.ROLE,
            timeout_s=self._append_timeout_s,
            data=batch,
            headers={MAP_EPOCH_HEADER: str(int(map_epoch))},
        )
        obj = answer.json()
        base, last = _int_field(obj, "base_offset"), _int_field(obj, "last_offset")
        if last < base:
            raise InternalError(BAD_NODE_ANSWER, f"write node {address} answered last_offset < base_offset")
        return base, last

    async def append_many(
        self, address: str, items: Sequence[Frame], map_epoch: int
    ) -> list[tuple[int, int] | VpqError]:
        """Append several frames in one request (``write_nodes.append_frames``); per frame,
        in order, ``(base_offset, last_offset)`` once durable or the node's error for it. A
        failure of the whole request (unreachable, malformed body) raises."""
        answer = await call_node(
            self._session,
            "POST",
            address,
            "/internal/v1/append",
            role=self.ROLE,
            timeout_s=self._append_timeout_s,
            data=encode_frames(items),
            headers={MAP_EPOCH_HEADER: str(int(map_epoch))},
        )
        obj = answer.json()
        entries = obj.get("results") if isinstance(obj, Mapping) else None
        if not isinstance(entries, list) or len(entries) != len(items):
            raise InternalError(BAD_NODE_ANSWER, f"write node {address} answered no result per appended batch")
        out: list[tuple[int, int] | VpqError] = []
        for entry in entries:
            if isinstance(entry, Mapping) and isinstance(entry.get("error"), Mapping):
                status = entry.get("status")
                out.append(VpqError.from_dict({"error": entry["error"]}, status if isinstance(status, int) else 500))
                continue
            base, last = _int_field(entry, "base_offset"), _int_field(entry, "last_offset")
            if last < base:
                raise InternalError(BAD_NODE_ANSWER, f"write node {address} answered last_offset < base_offset")
            out.append((base, last))
        return out

    async def read(self, address: str, pp: int, offset: int, max_bytes: int, wait_ms: int) -> ReadResult:
        """Whole raw batches of ``pp`` from the batch holding ``offset`` (durable data only),
        waiting up to ``wait_ms`` (capped at 30000) when there is nothing yet."""
        wait = max(0, min(int(wait_ms), MAX_WAIT_MS))
        answer = await call_node(
            self._session,
            "GET",
            address,
            f"/internal/v1/partitions/{int(pp)}/read",
            role=self.ROLE,
            timeout_s=wait / 1000.0 + self._read_margin_s,
            params={"offset": str(int(offset)), "max_bytes": str(int(max_bytes)), "wait_ms": str(wait)},
        )
        return ReadResult(
            answer.body,
            _int_header(answer.headers, START_OFFSET_HEADER),
            _int_header(answer.headers, END_OFFSET_HEADER),
        )

    async def partitions(self, address: str) -> dict[str, Any]:
        """``{"node_id", "partitions": [{"id", "start_offset", "end_offset", "bytes",
        "online"}]}`` for the partitions the node owns."""
        answer = await call_node(
            self._session, "GET", address, "/internal/v1/partitions", role=self.ROLE, timeout_s=self._admin_timeout_s
        )
        obj = answer.json()
        if not isinstance(obj, dict) or not isinstance(obj.get("partitions"), list):
            raise InternalError(BAD_NODE_ANSWER, f"write node {address} answered partitions without a list")
        return obj
