"""Persisted ack state of a consumer group, in the compact form, fenced by the group lease.

Why not ``metadata.acks``: that store keeps the pair form ``(low_watermark,
done offsets above it)`` capped at 10,000 offsets. One message that stays
outstanding (a message of an env without consumers waits for ever, a nack may
delay one for a day) makes the pair form grow with every later ack, so the read
node would have to stop ingesting the pp after ~9,000 acks: a single stuck test
message would stall a production group. The compact form
(``read_nodes.ack_tracker.PartitionAckState``) lists the OUTSTANDING offsets
instead, so its size is bounded by what the group holds, never by what it acked.

What is stored, per pp (``trim_state``): the compact state, except that when
it lists more than ``DEFAULT_MAX_LISTED`` outstanding offsets above the highest
done offset ``H`` (a backlog ingested but not delivered yet), it is cut just
above ``H``: ``scanned_to' = min(scanned_to, max(H + 1, floor))`` and only the
outstanding offsets below it are listed. Everything at or above
``scanned_to'`` is then "not done", which is exact because nothing there is
done (a successor re-reads from there). So the list stays small in the common
cases: consuming a backlog in order lists about the in-flight messages; a stuck
message plus thousands of later acks lists one offset. Its worst case is the
group's outstanding messages (``max_unacked``). ``H`` only has to be an upper
bound of the highest done offset (the caller records every offset it asked to
ack or dead-lettered), and ``floor`` is the ``scanned_to`` of the state the
group was restored from (done offsets below it are implied, not listed).

Storage: one hash per group, ``{prefix}:ackstate:{queue}:{group}``, field
stream (``read_nodes.delivery_types.stream_of``: a context of a pp) ->
``"2|queue_id|token|scanned_to|pending|acked|parked"`` (``pending``: first
offset then successive differences; ``acked``: differences from
``scanned_to``; both comma separated, possibly empty; ``parked``: segments
``key_hash:from_offset:until`` separated by commas, ``until`` empty when open).
Version 1 (field pp, no ``parked``) is still read: such a state holds for every
context of its pp. ``save`` is one Lua script that writes only while
``token`` is the live token of the group lease ``group:{queue}:{group}``
(``metadata.leases``): a node that lost the group can never overwrite its
successor's state. ``load`` ignores states written for another queue id (a
queue deleted and created again under the same name). ``delete_group`` is for
the admin flow that deletes a queue or group (it must call it alongside
``metadata.acks.AckStore.delete_group``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping

import redis.asyncio as aioredis

from vpq.metadata.keys import Keys
from vpq.metadata.leases import group_resource
from vpq.read_nodes.ack_tracker import PartitionAckState

FORMAT_VERSION = "2"
LEGACY_VERSION = "1"  # per pp, no parked keys: still read
DEFAULT_MAX_LISTED = 1000
"""Outstanding offsets above the highest done one listed before a state is cut there."""

# KEYS: state hash, group lease ; ARGV: token, pp, blob, pp, blob, ...
_SAVE = """
if redis.call('HGET', KEYS[2], 'token') ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


def _deltas(values: Iterable[int], base: int) -> str:
    out: list[str] = []
    prev = base
    for v in values:
        out.append(str(v - prev))
        prev = v
    return ",".join(out)


def _undeltas(text: str, base: int) -> list[int]:
    out: list[int] = []
    if not text:
        return out
    prev = base
    for part in text.split(","):
        prev += int(part)
        out.append(prev)
    return out


def encode_state(queue_id: int, token: int, state: PartitionAckState) -> str:
    """The stored text of one pp's state (see the module docstring)."""
    pending = state.pending_below
    pending_s = f"{pending[0]}:{_deltas(pending, pending[0])}" if pending else ""
    fields = (str(int(queue_id)), str(int(token)), str(state.scanned_to), pending_s)
    parked = ",".join(f"{h}:{start}:{'' if until is None else until}" for h, start, until in state.parked)
    return "|".join((FORMAT_VERSION, *fields, _deltas(state.acked_above, state.scanned_to), parked))


def decode_state(raw: str) -> tuple[int, int, PartitionAckState]:
    """``(queue_id, token, state)``; ValueError on anything malformed."""
    try:
        parts = raw.split("|")
        version = parts[0]
        if version == LEGACY_VERSION and len(parts) == 6:
            parked_s = ""
            _, qid, token, scanned, pending_s, acked_s = parts
        elif version == FORMAT_VERSION and len(parts) == 7:
            _, qid, token, scanned, pending_s, acked_s, parked_s = parts
        else:
            raise ValueError(f"unknown ack state format {version!r}")
        parked: list[tuple[int, int, int | None]] = []
        for seg in parked_s.split(",") if parked_s else ():
            h, start, until = seg.split(":")
            parked.append((int(h), int(start), int(until) if until else None))
        scanned_to = int(scanned)
        pending: list[int] = []
        if pending_s:
            first_s, rest = pending_s.split(":", 1)
            pending = _undeltas(rest, int(first_s))
        state = PartitionAckState(scanned_to, tuple(pending), tuple(_undeltas(acked_s, scanned_to)), tuple(parked))
        return int(qid), int(token), state
    except (ValueError, TypeError) as exc:
        raise ValueError(f"malformed ack state {raw[:80]!r}: {exc}") from None


def trim_state(
    state: PartitionAckState, highest_done: int, floor: int, max_listed: int = DEFAULT_MAX_LISTED
) -> PartitionAckState:
    """``state``, cut just above the highest done offset when it lists more than
    ``max_listed`` outstanding offsets above it (see the module docstring).

    ``highest_done``: an upper bound of the highest acked or dead-lettered offset
    (-1 when none); ``floor``: the ``scanned_to`` the group was restored from (0
    when it started fresh). Never claims an offset done that ``state`` does not.
    Not cutting when few offsets are listed keeps ``scanned_to`` (and so the
    position a successor re-reads from) high in pps where the queue has few or
    no records."""
    if state.acked_above:
        return state
    cut = min(state.scanned_to, max(highest_done + 1, floor))
    if cut >= state.scanned_to:
        return state
    pending = state.pending_below
    first_above = bisect_left(pending, cut)
    if len(pending) - first_above <= max_listed:
        return state
    parked = tuple(seg for seg in state.parked if seg[1] < cut)  # at or above the cut all is "not done"
    return PartitionAckState(cut, pending[:first_above], (), parked)


class AckSnapshots:
    """What one hosted group last persisted, and what changed since. Pure.

    ``note_done(stream, offset)`` for every offset the group asked to ack or
    dead-lettered; ``changes(compact, token)`` gives the encoded states of the pps
    whose trimmed state differs from the last ``mark_saved`` one."""

    __slots__ = ("queue_id", "_highest", "_floors", "_saved")

    def __init__(self, queue_id: int, restored: Mapping[int, PartitionAckState] | None = None) -> None:
        self.queue_id = queue_id
        self._highest: dict[int, int] = {}
        self._floors: dict[int, int] = {}
        self._saved: dict[int, str] = {}
        for pp, st in (restored or {}).items():
            self._floors[pp] = st.scanned_to
            if st.acked_above:
                self._highest[pp] = st.acked_above[-1]

    def note_done(self, pp: int, offset: int) -> None:
        if offset > self._highest.get(pp, -1):
            self._highest[pp] = offset

    def trimmed(self, compact: Mapping[int, PartitionAckState]) -> dict[int, PartitionAckState]:
        return {
            pp: trim_state(st, self._highest.get(pp, -1), self._floors.get(pp, 0)) for pp, st in compact.items()
        }

    def changes(self, compact: Mapping[int, PartitionAckState], token: int) -> dict[int, str]:
        out: dict[int, str] = {}
        for pp, st in self.trimmed(compact).items():
            blob = encode_state(self.queue_id, token, st)
            if self._saved.get(pp) != blob:
                out[pp] = blob
        return out

    def mark_saved(self, blobs: Mapping[int, str]) -> None:
        self._saved.update(blobs)


class AckStateStore:
    """Fenced compact ack states in Redis (the caller owns the client)."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._save = client.register_script(_SAVE)

    def key(self, queue: str, group: str) -> str:
        return f"{self._keys.prefix}:ackstate:{queue}:{group}"

    async def save(self, queue: str, group: str, token: int, blobs: Mapping[int, str]) -> bool:
        """Store the encoded pp states; False (nothing stored) when ``token`` is not
        the live group lease's token."""
        if not blobs:
            return True
        args: list[str | int] = [int(token)]
        for pp, blob in blobs.items():
            args += [int(pp), blob]
        ok = await self._save(keys=[self.key(queue, group), self._keys.lease(group_resource(queue, group))], args=args)
        return bool(ok)

    async def load(self, queue: str, group: str, queue_id: int) -> dict[int, PartitionAckState]:
        """The persisted state of every pp written for ``queue_id`` (others ignored)."""
        raw = await self._client.hgetall(self.key(queue, group))
        out: dict[int, PartitionAckState] = {}
        for pp, blob in raw.items():
            qid, _token, state = decode_state(blob)
            if qid == queue_id:
                out[int(pp)] = state
        return out

    async def delete_group(self, queue: str, group: str) -> None:
        await self._client.delete(self.key(queue, group))
