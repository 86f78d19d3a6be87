"""Benchmark message bodies: fixed-size payloads that carry their own identity. Pure.

Every benchmark message is ``MESSAGE_BYTES`` (1 KiB) of ASCII: ``key|seq|sched_us|``
followed by ``x`` padding. ``key`` and ``seq`` identify the message (for the loss,
duplicate and order checks), ``sched_us`` is the time the message was *scheduled* to be
sent, in microseconds of the sending process's monotonic clock (for open-loop latency).
ASCII only, so the same bytes travel unchanged as raw bytes (Redis, NATS, RabbitMQ) or as
a JSON string value (vpq).
"""

from __future__ import annotations

from dataclasses import dataclass

MESSAGE_BYTES = 1024
_SEP = b"|"


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a payload says about itself."""

    key: str
    seq: int
    sched_us: int


def make_payload(key: str, seq: int, sched_us: int = 0, size: int = MESSAGE_BYTES) -> bytes:
    """The ``size``-byte payload of message ``seq`` of ``key``.

    Raises ``ValueError`` when the key holds ``|`` or non-ASCII text, or when the header
    does not fit in ``size`` bytes.
    """
    if "|" in key or not key.isascii():
        raise ValueError(f"benchmark keys are ASCII without '|': {key!r}")
    if seq < 0 or sched_us < 0:
        raise ValueError("seq and sched_us must be >= 0")
    head = f"{key}|{seq}|{sched_us}|".encode("ascii")
    if len(head) > size:
        raise ValueError(f"payload header of {len(head)} bytes does not fit in {size}")
    return head.ljust(size, b"x")


def parse_payload(data: bytes | str) -> Stamp:
    """The :class:`Stamp` of a payload made by :func:`make_payload` (``ValueError`` otherwise)."""
    raw = data.encode("ascii") if isinstance(data, str) else data
    parts = raw.split(_SEP, 3)
    if len(parts) != 4:
        raise ValueError("not a benchmark payload")
    try:
        return Stamp(parts[0].decode("ascii"), int(parts[1]), int(parts[2]))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError("not a benchmark payload") from exc


class KeySequencer:
    """Hands out the next sequence number of each key (0, 1, 2, ... per key)."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def next(self, key: str) -> int:
        seq = self._next.get(key, 0)
        self._next[key] = seq + 1
        return seq

    def issued(self, key: str) -> int:
        """How many sequence numbers ``key`` has been given."""
        return self._next.get(key, 0)


def key_name(index: int) -> str:
    """The benchmark's name for key number ``index``."""
    return f"k{index:05d}"
