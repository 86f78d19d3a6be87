"""Message ids: opaque strings, unique within a queue, derived from (pp, offset).

A record lives at exactly one (physical partition, offset), and a queue's records
never share a position, so ``(pp, offset)`` identifies a message within its queue
(and within the whole cluster). The id is both numbers in canonical decimal
joined by ``-``: ``encode_message_id(3, 1234) == "3-1234"``.

Canonical means there is exactly one id per message: no leading zeros (``"0"``
itself is fine), no sign, no whitespace. ``decode_message_id``
accepts only canonical ids and raises ``MessageIdError`` (a ``ValueError``) with
a clear message for anything else, so an API layer can answer 400.

Clients must treat ids as opaque; this format may change only with ``/v2``.

Pure logic: no I/O.
"""

from __future__ import annotations

import re

MAX_PP = (1 << 32) - 1
MAX_OFFSET = (1 << 63) - 1

_ID_RE = re.compile(r"(0|[1-9][0-9]{0,9})-(0|[1-9][0-9]{0,18})", re.ASCII)
# canonical with at most 9 + 18 digits: in range without converting (fast path only)
_SHORT_ID = r"(?:0|[1-9][0-9]{0,8})-(?:0|[1-9][0-9]{0,17})"
_SHORT_ID_RE = re.compile(_SHORT_ID, re.ASCII)
_SHORT_ID_LIST_RE = re.compile(rf"{_SHORT_ID}(?:,{_SHORT_ID})*", re.ASCII)


class MessageIdError(ValueError):
    """A malformed message id. ``message_id`` is the offending value."""

    def __init__(self, message_id: object, reason: str) -> None:
        self.message_id = message_id
        super().__init__(f"invalid message id {message_id!r}: {reason}")


def _check_int(value: object, name: str, maximum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= maximum:
        raise ValueError(f"{name} must be an integer in [0, {maximum}], got {value!r}")
    return value


def encode_message_id(pp: int, offset: int) -> str:
    """The id of the record at ``offset`` of physical partition ``pp``.

    ``pp`` in ``[0, 2**32)``, ``offset`` in ``[0, 2**63)``; ValueError otherwise.
    """
    if type(pp) is int and type(offset) is int and 0 <= pp <= MAX_PP and 0 <= offset <= MAX_OFFSET:
        return f"{pp}-{offset}"
    _check_int(pp, "pp", MAX_PP)
    _check_int(offset, "offset", MAX_OFFSET)
    return f"{pp}-{offset}"


def _parse(message_id: object) -> tuple[int, int] | str:
    """``(pp, offset)`` of a canonical id, or the reason it is not one."""
    if not isinstance(message_id, str):
        return "must be a string"
    m = _ID_RE.fullmatch(message_id)
    if m is None:
        return "expected '<partition>-<offset>' as returned by produce or poll"
    pp, offset = int(m.group(1)), int(m.group(2))
    if pp > MAX_PP or offset > MAX_OFFSET:
        return "partition or offset out of range"
    return pp, offset


def decode_message_id(message_id: object) -> tuple[int, int]:
    """``(pp, offset)`` of a canonical id; MessageIdError for anything else."""
    parsed = _parse(message_id)
    if isinstance(parsed, str):
        raise MessageIdError(message_id, parsed)
    return parsed


def check_message_id(message_id: object) -> str:
    """``message_id`` itself when it is a canonical id; MessageIdError otherwise (for
    validating ids without decoding them)."""
    if type(message_id) is str and _SHORT_ID_RE.fullmatch(message_id) is not None:
        return message_id
    decode_message_id(message_id)
    return message_id  # type: ignore[return-value]  # decode_message_id accepted a str


def all_short_ids(message_ids: object) -> bool:
    """True when ``message_ids`` is a non-empty list of strings that are all canonical ids
    of at most 9 + 18 digits (each one ``check_message_id`` accepts), checked with one
    regular expression over the joined list. False says nothing: check them one by one."""
    if type(message_ids) is not list or not message_ids:
        return False
    try:
        joined = ",".join(message_ids)
    except TypeError:  # not all strings
        return False
    return joined.count(",") == len(message_ids) - 1 and _SHORT_ID_LIST_RE.fullmatch(joined) is not None


def decode_message_ids(message_ids: object) -> list[tuple[int, int]]:
    """Decode a whole list first (all or nothing): MessageIdError names the first bad
    id and its index, so a request with one bad id can be rejected unchanged."""
    if not isinstance(message_ids, (list, tuple)):
        raise MessageIdError(message_ids, "ids must be a list of strings")
    out: list[tuple[int, int]] = []
    append = out.append
    match = _ID_RE.fullmatch
    for i, mid in enumerate(message_ids):
        # fast path: a canonical id with up to 9 + 18 digits is in range without checking;
        # anything else takes the checked path, which names what is wrong
        m = match(mid) if type(mid) is str else None
        if m is not None:
            pp, offset = m.groups()
            if len(pp) < 10 and len(offset) < 19:
                append((int(pp), int(offset)))
                continue
        parsed = _parse(mid)
        if isinstance(parsed, str):
            raise MessageIdError(mid, f"at index {i}: {parsed}")
        append(parsed)
    return out
