"""Persisted ack state of the consumer groups: one hash per group, fenced by the group lease.

Storage: ``{prefix}:ackstate:{queue}:{group}`` (``Keys.acks``), field stream (the read
node's ``read_nodes.delivery_types.stream_of``: a context of a pp) -> one state, in the
compact form the read node keeps (``read_nodes.ack_tracker.PartitionAckState``: the
offsets still OUTSTANDING below a scan position, the done ones above it, the parked
key segments), so its size is bounded by what the group holds, never by what it acked.

Encoding of one state: ``"3|queue_id|token|scanned_to|pending|acked|parked|delayed"``
(``pending``: first offset, ``:``, then the differences from it, each offset from the
previous; ``acked``: differences from ``scanned_to``; both comma separated, possibly
empty; ``parked``: segments ``key_hash:from_offset:until`` separated by commas,
``until`` empty when open; ``delayed``: ``floor:due_ms:offset`` or empty, the delayed
messages waiting for their due time, see ``PartitionAckState``). Formats ``2`` (no
``delayed`` part) and ``1`` (field a pp, no ``parked`` part either) are still read:
a format-1 state holds for every context of its pp. ``decode_state`` checks the syntax
only; the read node checks the offsets' invariants when it builds its state.

Contract:

- ``save(queue, group, token, blobs)`` is one Lua script that writes the encoded states
  only while ``token`` is the live token of the group lease ``group:{queue}:{group}``
  (``metadata.leases``): a node that lost the group can never overwrite its
  successor's state. False (nothing written) otherwise.
- ``load(queue, group, queue_id)`` ignores states written for another queue id (a
  queue deleted and created again under the same name).
- The hash belongs to the group: ``GroupStore.delete_group`` (run for every group
  when the queue is deleted) removes it with the group's other keys.

Pure apart from ``AckStateStore``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol

import redis.asyncio as aioredis

from vpq.metadata.keys import Keys
from vpq.metadata.leases import group_resource

FORMAT_VERSION = "3"
PARKED_VERSION = "2"  # no delayed part: still read
LEGACY_VERSION = "1"  # per pp, no parked keys: still read

Parked = tuple[tuple[int, int, int | None], ...]
Delayed = tuple[int, int, int] | None

# KEYS: state hash, group lease ; ARGV: token, stream, blob, stream, blob, ...
_SAVE = """
if redis.call('HGET', KEYS[2], 'token') ~= ARGV[1] then return 0 end
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 1
"""


class AckFields(Protocol):
    """What ``encode_state`` reads of a state (``PartitionAckState`` is one)."""

    @property
    def scanned_to(self) -> int: ...
    @property
    def pending_below(self) -> tuple[int, ...]: ...
    @property
    def acked_above(self) -> tuple[int, ...]: ...
    @property
    def parked(self) -> Parked: ...
    @property
    def delayed(self) -> Delayed: ...


class StoredAckState(NamedTuple):
    """One decoded state, fields in ``PartitionAckState``'s order (so
    ``PartitionAckState(*stored)`` builds and checks it)."""

    scanned_to: int
    pending_below: tuple[int, ...] = ()
    acked_above: tuple[int, ...] = ()
    parked: Parked = ()
    delayed: Delayed = None


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


def encode_state(queue_id: int, token: int, state: AckFields) -> str:
    """The stored text of one state (see the module docstring)."""
    pending = state.pending_below
    pending_s = f"{pending[0]}:{_deltas(pending, pending[0])}" if pending else ""
    fields = (str(int(queue_id)), str(int(token)), str(state.scanned_to), pending_s)
    parked = ",".join(f"{h}:{start}:{'' if until is None else until}" for h, start, until in state.parked)
    delayed = "" if state.delayed is None else ":".join(str(int(v)) for v in state.delayed)
    return "|".join((FORMAT_VERSION, *fields, _deltas(state.acked_above, state.scanned_to), parked, delayed))


def decode_state(raw: str) -> tuple[int, int, StoredAckState]:
    """``(queue_id, token, state)`` of a stored text in format 3, 2 or 1; ValueError on
    anything malformed."""
    try:
        parts = raw.split("|")
        version = parts[0]
        delayed_s = ""
        if version == LEGACY_VERSION and len(parts) == 6:
            parked_s = ""
            _, qid, token, scanned, pending_s, acked_s = parts
        elif version == PARKED_VERSION and len(parts) == 7:
            _, qid, token, scanned, pending_s, acked_s, parked_s = parts
        elif version == FORMAT_VERSION and len(parts) == 8:
            _, qid, token, scanned, pending_s, acked_s, parked_s, delayed_s = parts
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
        delayed: Delayed = None
        if delayed_s:
            floor, due, offset = (int(v) for v in delayed_s.split(":"))
            delayed = (floor, due, offset)
        state = StoredAckState(
            scanned_to, tuple(pending), tuple(_undeltas(acked_s, scanned_to)), tuple(parked), delayed
        )
        return int(qid), int(token), state
    except (ValueError, TypeError) as exc:
        raise ValueError(f"malformed ack state {raw[:80]!r}: {exc}") from None


class AckStateStore:
    """Fenced ack states in Redis (the caller owns the client)."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._save = client.register_script(_SAVE)

    async def save(self, queue: str, group: str, token: int, blobs: Mapping[int, str]) -> bool:
        """Store the encoded states by stream; False (nothing stored) when ``token`` is
        not the live group lease's token."""
        if not blobs:
            return True
        args: list[str | int] = [int(token)]
        for stream, blob in blobs.items():
            args += [int(stream), blob]
        keys = [self._keys.acks(queue, group), self._keys.lease(group_resource(queue, group))]
        return bool(await self._save(keys=keys, args=args))

    async def load(self, queue: str, group: str, queue_id: int) -> dict[int, StoredAckState]:
        """The persisted state of every stream written for ``queue_id`` (others ignored)."""
        raw = await self._client.hgetall(self._keys.acks(queue, group))
        out: dict[int, StoredAckState] = {}
        for stream, blob in raw.items():
            qid, _token, state = decode_state(blob)
            if qid == queue_id:
                out[int(stream)] = state
        return out
