"""Which columns of a table to show in a given width, and how wide. Pure: no I/O, no rich.

A table is a list of ``Column`` specs and rows of already formatted strings (keyed by
``Column.key``). ``fit`` keeps every column when ``wide``; otherwise it drops the
columns of highest ``priority`` number first (priority 0 is never dropped; among equal
priorities the rightmost goes first) until the table fits ``width``, then shrinks the
``shrink`` columns (names, ranges), widest first, no lower than ``min_width``. Cells of
a shrunk column are cut with an ellipsis (``humanize.truncate``).

Width model (rich's default boxed table): each column takes its content width plus two
padding spaces plus one border; one more border closes the row.

``auto_cell`` formats a field the views have no spec for, by its name: ``*_ms``
timestamps (``created_ms``, ``since_ms``, ``*_at_ms``) as ages, other ``*_ms`` as
durations, ``bytes*`` as sizes, ``*_per_s`` as rates, integer lists as ranges.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from vpq.cli import humanize as h

TIMESTAMP_KEYS = ("created_ms", "updated_ms", "since_ms", "last_seen_ms", "published_ms", "joined_ms", "time_ms")


@dataclass(frozen=True)
class Column:
    """One column: ``key`` in the rows, ``header`` shown, ``priority`` (0 = always kept,
    higher = dropped sooner), right-aligned numbers, may be cut to ``min_width``."""

    key: str
    header: str
    priority: int = 0
    right: bool = False
    shrink: bool = False
    min_width: int = 8


def table_width(widths: Sequence[int]) -> int:
    """Printed width of a boxed table whose columns have these content widths."""
    return sum(widths) + 3 * len(widths) + 1 if widths else 0


def natural_width(column: Column, rows: Sequence[Mapping[str, str]]) -> int:
    return max([len(column.header)] + [len(row.get(column.key, "")) for row in rows])


def fit(
    columns: Sequence[Column], rows: Sequence[Mapping[str, str]], width: int, wide: bool = False
) -> list[tuple[Column, int]]:
    """The columns to show, in their order, each with its content width; see the module
    docstring. The result may still exceed ``width`` when the priority-0 columns at their
    ``min_width`` do not fit (the renderer then lets rich cut)."""
    widths = {c.key: natural_width(c, rows) for c in columns}
    kept = list(columns)
    if not wide:
        droppable = sorted(
            (i for i, c in enumerate(columns) if c.priority > 0), key=lambda i: (columns[i].priority, i), reverse=True
        )
        for i in droppable:
            if table_width([widths[c.key] for c in kept]) <= width:
                break
            kept.remove(columns[i])
        excess = table_width([widths[c.key] for c in kept]) - width
        for c in sorted((c for c in kept if c.shrink), key=lambda c: widths[c.key], reverse=True):
            if excess <= 0:
                break
            cut = min(excess, max(widths[c.key] - max(c.min_width, len(c.header)), 0))
            widths[c.key] -= cut
            excess -= cut
    return [(c, widths[c.key]) for c in kept]


def compress_ranges(numbers: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 8, 10, 11]`` -> ``"0-3,8,10-11"``."""
    nums = sorted(set(numbers))
    parts: list[str] = []
    i = 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(parts)


def cell(value: Any) -> str:
    """A plain table cell: integer lists as ranges, other containers as compact JSON."""
    if value is None:
        return h.DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return compress_ranges(value)
    if isinstance(value, (list, dict)):
        return orjson.dumps(value).decode()
    if value == "":
        return '""'
    return str(value)


def auto_cell(key: str, value: Any, now_ms: int) -> str:
    """``value`` of field ``key`` in human units guessed from the name; see the module docstring."""
    if not h.is_number(value):
        return cell(value)
    if key in TIMESTAMP_KEYS or key.endswith("_at_ms"):
        return h.age(value, now_ms)
    if key.endswith("_ms"):
        return h.duration_ms(value)
    if key.endswith("bytes_per_s"):
        return h.byte_rate(value)
    if key.startswith("messages_per_s") or key.startswith("msgs_per_s"):
        return h.rate(value, "msg/s")
    if key.endswith("_per_s"):
        return f"{h.count(value)}/s"
    if key == "bytes" or key.startswith("bytes") or key.endswith("_bytes"):
        return h.size(value)
    return h.count(value) if abs(value) >= 10_000 or isinstance(value, float) else str(value)


def header_of(key: str) -> str:
    """A field name as a header: ``in_flight`` -> ``in flight``, ``*_ms`` without the unit."""
    short = {"virtual_partitions": "vps", "messages_per_s": "messages per s", "bytes_per_s": "bytes per s"}
    if key in short:
        return short[key]
    return key.removesuffix("_ms").replace("_", " ")
