"""Client side of the write nodes' internal HTTP API (``WriteNodeClient``).

Wire format: ``docs/internals.md`` ("Write node"). Every call goes through
``node_rpc.call.call_node``, whose contract it keeps: a node's error comes back as the
same exception, an unreachable node is ``Unavailable`` with code ``node_unreachable``, a
malformed 2xx answer is a 500 ``bad_node_answer``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy

from vpq.common.errors import InternalError, VpqError
from vpq.node_rpc.append_frames import Deduplicated, Frame, encode_frames, frame_buffers
from vpq.node_rpc.call import BAD_NODE_ANSWER, MAX_WAIT_MS, call_node
from vpq.node_rpc.node_pools import NodePools

MAP_EPOCH_HEADER = "X-Map-Epoch"
APPEND_PATH = "/internal/v1/append"
START_OFFSET_HEADER = "X-Start-Offset"
END_OFFSET_HEADER = "X-End-Offset"


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
        pools: NodePools | None = None,
    ) -> None:
        self._session = session
        self._pools = pools
        self._append_timeout_s = append_timeout_s
        self._read_margin_s = read_margin_s
        self._admin_timeout_s = admin_timeout_s

    async def append_many(
        self, address: str, items: Sequence[Frame], map_epoch: int
    ) -> list[tuple[int, int] | Deduplicated | VpqError]:
        """Append several frames in one request (``node_rpc.append_frames``); per frame,
        in order, ``(base_offset, last_offset)`` once durable, ``Deduplicated`` when some
        of its records were duplicates, or the node's error for it. A failure of the whole
        request (unreachable, malformed body) raises."""
        headers = {MAP_EPOCH_HEADER: str(int(map_epoch))}
        if self._pools is not None:  # the batches are written out as they are, not joined
            answer = await self._pools.call(
                "POST",
                address,
                APPEND_PATH,
                role=self.ROLE,
                timeout_s=self._append_timeout_s,
                data=frame_buffers(items),
                headers=headers,
            )
        else:
            answer = await call_node(
                self._session,
                "POST",
                address,
                APPEND_PATH,
                role=self.ROLE,
                timeout_s=self._append_timeout_s,
                data=encode_frames(items),
                headers=headers,
            )
        obj = answer.json()
        entries = obj.get("results") if isinstance(obj, Mapping) else None
        if not isinstance(entries, list) or len(entries) != len(items):
            raise InternalError(BAD_NODE_ANSWER, f"write node {address} answered no result per appended batch")
        out: list[tuple[int, int] | Deduplicated | VpqError] = []
        for entry in entries:
            if isinstance(entry, Mapping) and isinstance(entry.get("error"), Mapping):
                status = entry.get("status")
                out.append(VpqError.from_dict({"error": entry["error"]}, status if isinstance(status, int) else 500))
                continue
            if isinstance(entry, Mapping) and "offsets" in entry:
                out.append(_deduplicated(entry, address))
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
        path = f"/internal/v1/partitions/{int(pp)}/read"
        timeout_s = wait / 1000.0 + self._read_margin_s
        if self._pools is not None:
            query = f"?offset={int(offset)}&max_bytes={int(max_bytes)}&wait_ms={wait}"
            answer = await self._pools.call("GET", address, path + query, role=self.ROLE, timeout_s=timeout_s)
        else:
            answer = await call_node(
                self._session,
                "GET",
                address,
                path,
                role=self.ROLE,
                timeout_s=timeout_s,
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


def _deduplicated(entry: Mapping[str, Any], address: str) -> Deduplicated:
    offsets, vps = entry.get("offsets"), entry.get("vps")
    if (
        not isinstance(offsets, list)
        or not isinstance(vps, list)
        or len(offsets) != len(vps)
        or not all(type(x) is int and x >= 0 for x in offsets)
        or not all(type(x) is int and x >= 0 for x in vps)
    ):
        raise InternalError(BAD_NODE_ANSWER, f"write node {address} answered malformed deduplicated offsets")
    return Deduplicated(offsets, vps)
