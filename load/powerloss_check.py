"""The delivery check of a power-loss campaign (pure: no I/O).

Each producer ``p`` sends its messages one request at a time, with values
``b"<p>:<seq>"`` and ``seq`` increasing, and remembers the offset the write node
acknowledged for each. After a crash and a restart, the log read back must hold:

- every acknowledged message, at the offset it was acknowledged with (``lost`` and
  ``moved`` count the failures);
- each producer's messages in ``seq`` order, each at most once (``reordered``,
  ``duplicated``): one producer is one key, so this is per-key order.

Messages that were never acknowledged may or may not be there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


def message_value(producer: int, seq: int) -> bytes:
    return f"{producer}:{seq}".encode()


def parse_value(value: bytes) -> tuple[int, int] | None:
    """(producer, seq) of a value made by :func:`message_value`, ``None`` otherwise."""
    head, sep, tail = value.partition(b":")
    if not sep or not head.isdigit() or not tail.isdigit():
        return None
    return int(head), int(tail)


@dataclass(frozen=True, slots=True)
class DeliveryCheck:
    acked: int  # acknowledged messages checked
    found: int  # messages in the log (acknowledged or not)
    lost: int  # acknowledged, not in the log
    moved: int  # acknowledged, in the log at another offset
    reordered: int  # a producer's message after a later one of the same producer
    duplicated: int  # a producer's message more than once
    foreign: int  # records whose value is not a producer's message

    @property
    def ok(self) -> bool:
        return not (self.lost or self.moved or self.reordered or self.duplicated or self.foreign)


def check_delivery(
    acked: Mapping[tuple[int, int], int], records: Iterable[tuple[int, bytes]]
) -> DeliveryCheck:
    """``acked``: (producer, seq) -> acknowledged offset; ``records``: (offset, value) of
    the log read back from its start, in offset order."""
    where: dict[tuple[int, int], int] = {}
    last_seq: dict[int, int] = {}
    found = reordered = duplicated = foreign = 0
    for offset, value in records:
        ident = parse_value(value)
        if ident is None:
            foreign += 1
            continue
        found += 1
        if ident in where:
            duplicated += 1
            continue
        where[ident] = offset
        producer, seq = ident
        if seq <= last_seq.get(producer, -1):
            reordered += 1
        last_seq[producer] = max(seq, last_seq.get(producer, -1))
    lost = moved = 0
    for ident, offset in acked.items():
        got = where.get(ident)
        if got is None:
            lost += 1
        elif got != offset:
            moved += 1
    return DeliveryCheck(len(acked), found, lost, moved, reordered, duplicated, foreign)
