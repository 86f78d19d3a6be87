"""The write node's fast lane (``common.http_lane``) for its two hot routes.

``POST /internal/v1/append``: it takes every append request on a plain keep-alive
connection and does what the middlewares and ``WriteNodeHandlers.append_many`` do, in
their order: the cluster secret (401), the ``X-Map-Epoch`` header (400
``invalid_header``), the frames (400 ``corrupt_batch``), then ``append_frames``; the
answer is the same ``{"results": [...]}`` body, and errors are the same JSON with their
headers.

``GET /internal/v1/partitions/{pp}/read?...``: taken when ``pp`` is 1 to 9 digits (the
aiohttp route's pattern) and the query holds only letters, digits, ``_``, ``-``, ``=``
and ``&`` (nothing to unescape); then the cluster secret, and
``WriteNodeHandlers.read_query`` with each parameter's first value, as aiohttp's
``request.query.get`` gives it. The same body, offset headers and errors.

Everything else goes to the aiohttp application.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Coroutine
from typing import Any

import orjson

from vpq.common.errors import BadRequest, InternalError, VpqError
from vpq.common.http1 import RequestHead
from vpq.common.http_lane import LaneAnswer, error_answer
from vpq.node_rpc.append_frames import Frame, FrameError, decode_frames
from vpq.node_rpc.cluster_auth import CLUSTER_SECRET_HEADER, check_cluster_secret
from vpq.write_nodes.handlers import CORRUPT_BATCH, MAP_EPOCH_HEADER, WriteNodeHandlers, map_epoch

log = logging.getLogger(__name__)

APPEND_PATH = "/internal/v1/append"
_SECRET = CLUSTER_SECRET_HEADER.lower()
_EPOCH = MAP_EPOCH_HEADER.lower()


class AppendLane:
    """The hot routes of one write node: append and tail read."""

    def __init__(self, handlers: WriteNodeHandlers, *, max_body_bytes: int, cluster_secret: str | None) -> None:
        self.max_body_bytes = max_body_bytes
        self._handlers = handlers
        self._secret = cluster_secret

    def wants(self, head: RequestHead) -> bool:
        if head.method == "GET":
            return _READ_TARGET.fullmatch(head.target) is not None
        return head.method == "POST" and head.target == APPEND_PATH

    def take(self, head: RequestHead, body: bytes) -> Coroutine[Any, Any, LaneAnswer] | None:
        if head.method == "GET":
            return self._take_read(head)
        try:
            if self._secret is not None:
                check_cluster_secret(self._secret, head.headers.get(_SECRET))
            epoch = map_epoch(head.headers.get(_EPOCH))
            try:
                frames = decode_frames(body)
            except FrameError as exc:
                raise BadRequest(CORRUPT_BATCH, f"malformed append frames: {exc}") from None
        except VpqError as err:
            return _failed(err)
        return self._append(frames, epoch)

    async def _append(self, frames: list[Frame], epoch: int) -> LaneAnswer:
        try:
            entries = await self._handlers.append_frames(frames, epoch)
        except VpqError as err:
            return error_answer(err)
        except Exception:
            log.exception("unexpected error in POST %s", APPEND_PATH)
            return error_answer(InternalError(message="internal error in the write node"))
        return LaneAnswer(200, orjson.dumps({"results": entries}))

    def _take_read(self, head: RequestHead) -> Coroutine[Any, Any, LaneAnswer] | None:
        match = _READ_TARGET.fullmatch(head.target)
        if match is None:
            return None
        try:
            if self._secret is not None:
                check_cluster_secret(self._secret, head.headers.get(_SECRET))
        except VpqError as err:
            return _failed(err)
        return self._read(int(match.group(1)), _first_values(match.group(2) or ""))

    async def _read(self, pp: int, query: dict[str, str]) -> LaneAnswer:
        try:
            data, headers = await self._handlers.read_query(pp, query.get)
        except VpqError as err:
            return error_answer(err)
        except Exception:
            log.exception("unexpected error in GET /internal/v1/partitions/%d/read", pp)
            return error_answer(InternalError(message="internal error in the write node"))
        return LaneAnswer(200, data, "application/octet-stream", list(headers.items()))


_READ_TARGET = re.compile(r"/internal/v1/partitions/(\d{1,9})/read(?:\?([A-Za-z0-9_=&-]*))?")


def _first_values(query: str) -> dict[str, str]:
    """Each parameter's first value (``a`` alone counts as ``a=``)."""
    out: dict[str, str] = {}
    for part in query.split("&"):
        if part:
            name, _, value = part.partition("=")
            out.setdefault(name, value)
    return out


async def _failed(err: VpqError) -> LaneAnswer:
    return error_answer(err)
