"""Message attributes the platform keeps in a record's headers. Pure, no I/O.

A produced message may carry attributes that are not the producer's own headers but
instructions to the platform (docs/api.md, additions): ``deliver_at_ms`` (from
``delay_ms`` or ``deliver_at_ms``), ``priority`` and ``dedup_id``. They are stored in the
record's header block under reserved names that begin with ``:`` so that no new record
format is needed and every reader of the log (read nodes, recovery, compaction) finds
them where it already looks:

==================  =========================================  =====================
header name         value (ASCII bytes)                        read by
==================  =========================================  =====================
``:deliver_at``     Unix ms as a decimal integer               read nodes (timers)
``:priority``       one digit ``1``-``9`` (0 is never stored)  read nodes (delivery)
``:dedup``          the producer's ``dedup_id``, 1-128 chars   write nodes (dedup)
``:group``          a group name (UTF-8)                       read nodes (ingestion)
==================  =========================================  =====================

``:group`` addresses a record to one consumer group of its queue: every other group
skips it (a dead-letter redrive, ``read_nodes.redrive``, writes it).

Contract:

- A producer's own header name never begins with ``:`` (the gateway refuses one with
  400 ``invalid_request``), so a reserved name in a stored record always came from the
  platform.
- Reserved headers are written first, in the order of the table, before the producer's
  headers; readers must not rely on that order.
- ``split`` separates a record's headers into the reserved attributes and the
  producer's own; consumers are only ever shown the producer's own (``user_headers``).
"""

from __future__ import annotations

from typing import NamedTuple

from vpq.codec.batch_common import Headers

RESERVED_PREFIX = ":"
DELIVER_AT = ":deliver_at"
PRIORITY = ":priority"
DEDUP = ":dedup"
GROUP = ":group"

MAX_DELAY_MS = 604_800_000  # 7 days
MAX_PRIORITY = 9
MAX_DEDUP_ID_CHARS = 128


class Attributes(NamedTuple):
    """The platform attributes of one record (defaults: none)."""

    deliver_at_ms: int | None = None
    priority: int = 0
    dedup_id: str | None = None


NO_ATTRIBUTES = Attributes()


def is_reserved(name: str) -> bool:
    return name.startswith(RESERVED_PREFIX)


def attribute_headers(deliver_at_ms: int | None, priority: int, dedup_id: str | None) -> Headers:
    """The reserved header pairs for these attributes (``()`` when all are defaults)."""
    pairs: list[tuple[str, bytes]] = []
    if deliver_at_ms is not None:
        pairs.append((DELIVER_AT, str(int(deliver_at_ms)).encode("ascii")))
    if priority:
        pairs.append((PRIORITY, str(int(priority)).encode("ascii")))
    if dedup_id is not None:
        pairs.append((DEDUP, dedup_id.encode("utf-8")))
    return tuple(pairs)


def split(headers: Headers) -> tuple[Attributes, Headers]:
    """``(attributes, the producer's own headers)`` of a record's headers.

    A reserved header whose value does not parse is ignored (treated as absent): the
    gateway never writes one, and a reader must not fail on the log's contents.
    """
    attrs = attributes(headers)
    return attrs, user_headers(headers)


def attributes(headers: Headers) -> Attributes:
    """The platform attributes of a record's headers (``split(headers)[0]``, without
    building the producer's own headers)."""
    deliver_at: int | None = None
    priority = 0
    dedup: str | None = None
    for name, value in headers:
        if name == DEDUP:
            try:
                dedup = value.decode("utf-8")
            except UnicodeDecodeError:
                pass
        elif name == DELIVER_AT:
            try:
                deliver_at = int(value)
            except ValueError:
                pass
        elif name == PRIORITY:
            if len(value) == 1 and 0x30 <= value[0] <= 0x39:
                priority = value[0] - 0x30
    if deliver_at is None and not priority and dedup is None:
        return NO_ATTRIBUTES
    return Attributes(deliver_at, priority, dedup)


def reader_attributes(headers: Headers) -> tuple[int | None, int, bytes | None]:
    """``(deliver_at_ms, priority, group)`` of a record's headers, in one pass: what a
    read node needs of them (``attributes`` without the dedup id; ``group`` is the
    ``:group`` value, None when absent; the last of a repeated name counts, as in
    ``attributes``, while ``addressed_elsewhere`` looks at the first ``:group``)."""
    deliver_at: int | None = None
    priority = 0
    group: bytes | None = None
    for name, value in headers:
        if name == DELIVER_AT:
            try:
                deliver_at = int(value)
            except ValueError:
                pass
        elif name == PRIORITY:
            if len(value) == 1 and 0x30 <= value[0] <= 0x39:
                priority = value[0] - 0x30
        elif name == GROUP and group is None:
            group = value
    return deliver_at, priority, group


def user_headers(headers: Headers) -> Headers:
    """The producer's own headers (the reserved ones removed)."""
    for name, _ in headers:
        if name.startswith(RESERVED_PREFIX):
            return tuple(pair for pair in headers if not pair[0].startswith(RESERVED_PREFIX))
    return headers


def addressed_elsewhere(headers: Headers, group: bytes) -> bool:
    """True when the record is addressed (``:group``) to a group other than ``group``."""
    for name, value in headers:
        if name == GROUP:
            return value != group
    return False
