"""``POST /internal/v1/replica/fetch``: a follower copies its leader's log (leader side).

Request JSON ``{"pp", "leader_epoch", "fetch_offset", "last_epoch", "replica",
"wait_ms", "max_bytes"}``. The node must lead ``pp`` (else 503 ``not_owner`` /
``not_leader``) in exactly ``leader_epoch`` (else 409 ``fenced_leader_epoch`` with
detail ``leader_epoch``: the follower re-reads the record; a zombie leader refuses the
followers of the newer epoch, so it never counts their progress).

- When ``fetch_offset`` > 0 the follower's last epoch is checked against the leader's
  epoch history: if the leader's end for that epoch is below ``fetch_offset`` (or the
  leader has not that epoch) the answer is empty with ``X-Diverging: "<epoch> <end>"``
  and the follower truncates.
- Otherwise the fetch is recorded (``LeaderState.fetched``: everything below
  ``fetch_offset`` is fsynced on the follower; a caught-up follower out of the in-sync
  set is added back), and the answer is the leader's durable raw batches from
  ``fetch_offset`` (long-polling up to ``wait_ms`` when there are none), with headers
  ``X-Leader-Epoch``, ``X-High-Watermark`` and ``X-Epoch-History`` (JSON list of
  [epoch, start offset]). Compaction leaves gaps in the offsets: the batches may start
  past ``fetch_offset``; when nothing is left from ``fetch_offset`` up to the durable end
  (compacted away), or ``fetch_offset`` is below the log's start (retention), the body
  is empty and ``X-Skip-To`` names the offset the follower continues at.
"""

from __future__ import annotations

import time

import orjson
from aiohttp import web

from vpq.codec.records import BatchView
from vpq.common.errors import BadRequest, Conflict, Unavailable
from vpq.write_nodes.errors import LogIOError, OffsetOutOfRangeError
from vpq.write_nodes.ownership import PartitionOwnership
from vpq.write_nodes.replica_follower import (
    DIVERGING_HEADER,
    HISTORY_HEADER,
    HW_HEADER,
    LEADER_EPOCH_HEADER,
    SKIP_HEADER,
)
from vpq.write_nodes.replication import FENCED_EPOCH, NOT_LEADER, ReplicaManager

MAX_FETCH_BYTES = 8 << 20
MAX_WAIT_MS = 30_000


def _int_field(body: dict, name: str, minimum: int, default: int | None = None) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadRequest("invalid_request", f"{name!r} must be an integer >= {minimum}", field=name)
    return value


class ReplicaFetchHandler:
    def __init__(self, ownership: PartitionOwnership, manager: ReplicaManager) -> None:
        self._ownership = ownership
        self._manager = manager

    async def fetch(self, request: web.Request) -> web.Response:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            raise BadRequest("invalid_json", "the fetch body is not JSON") from None
        if not isinstance(body, dict):
            raise BadRequest("invalid_request", "the fetch body must be a JSON object")
        pp = _int_field(body, "pp", 0)
        epoch = _int_field(body, "leader_epoch", 0)
        offset = _int_field(body, "fetch_offset", 0)
        last_epoch = _int_field(body, "last_epoch", -1, -1)
        replica = _int_field(body, "replica", 0)
        wait_ms = min(_int_field(body, "wait_ms", 0, 0), MAX_WAIT_MS)
        max_bytes = min(_int_field(body, "max_bytes", 1, 1 << 20), MAX_FETCH_BYTES)
        part = self._ownership.serving(pp)
        state = self._manager.state(pp)
        history = self._manager.histories.get(pp)
        if state is None or history is None or state.closed is not None:
            raise Unavailable(NOT_LEADER, f"write node {self._manager.node_id} does not lead partition {pp}", partition=pp)
        if epoch != state.epoch:
            raise Conflict(
                FENCED_EPOCH,
                f"partition {pp} is at leader epoch {state.epoch} on this node, the fetch names {epoch}",
                partition=pp,
                leader_epoch=state.epoch,
            )
        if replica == self._manager.me or replica not in state.replicas:
            raise BadRequest("invalid_request", f"write node {replica} is not a follower of partition {pp}", field="replica")
        plog = part.log
        assert plog is not None
        headers = {LEADER_EPOCH_HEADER: str(state.epoch), HISTORY_HEADER: orjson.dumps(history.entries).decode()}
        if offset > 0:
            e, end = history.end_offset_for(last_epoch, plog.end_offset)
            if e != last_epoch or offset > end:
                headers[DIVERGING_HEADER] = f"{e} {end}"
                return web.Response(body=b"", headers=headers, content_type="application/octet-stream")
        action = state.fetched(replica, offset, time.monotonic())
        if action == "shrink":
            await self._manager.drop(state, replica, "it asks for less than it had fsynced")
            if replica in state.isr:
                raise Unavailable(NOT_LEADER, f"partition {pp}: cannot take replica {replica} out of the in-sync set now")
            action = state.fetched(replica, offset, time.monotonic())
        if action == "expand":
            self._manager.expand(state, replica)
        if wait_ms > 0 and plog.durable_end_offset <= offset:
            await plog.wait_for(offset, wait_ms / 1000.0)
            part = self._ownership.serving(pp)
            plog = part.log
            assert plog is not None
            if self._manager.state(pp) is not state or state.closed is not None:
                raise Unavailable(NOT_LEADER, f"write node {self._manager.node_id} no longer leads partition {pp}", partition=pp)
        data = b""
        skip = 0
        end = plog.durable_end_offset
        if offset < end:
            try:
                data = plog.read(offset, max_bytes)
            except OffsetOutOfRangeError:
                skip = plog.start_offset if offset < plog.start_offset else 0
            except LogIOError as exc:
                self._ownership.mark_offline(part, exc)
                raise Unavailable("partition_offline", f"partition {pp} is offline: {exc}", partition=pp) from exc
            else:
                skip = 0 if data else end  # [offset, end) was compacted away
        if skip > offset:
            headers[SKIP_HEADER] = str(skip)
        state.answered(replica, skip if skip > offset else _next_offset(data, offset), time.monotonic())
        headers[HW_HEADER] = str(state.high_watermark)
        return web.Response(body=data, headers=headers, content_type="application/octet-stream")


def _next_offset(data: bytes, offset: int) -> int:
    pos, nxt = 0, offset
    while pos < len(data):
        view = BatchView(data, pos)
        nxt = view.next_offset
        pos += view.size
    return nxt
