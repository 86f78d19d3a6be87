"""The traffic-statistics row: what write nodes export and the Spark job reads.

One row counts the traffic one write node appended for one (queue, vp, lane, env)
during one time window::

    window_start_ms      int64   start of the window (UTC epoch ms), a multiple of window_ms
    window_ms            int64   window length in ms
    node_id              string  the write node that counted it
    queue                string  queue name ("" only in a heartbeat row, see below)
    vp                   int32   virtual partition, under ``virtual_partitions``
    virtual_partitions   int64   the queue's V when the row was written
    lane                 string  swimlane ("" = backbone)
    env                  string  environment
    messages             int64   messages appended in the window
    bytes                int64   payload bytes appended in the window

A node that counted nothing in a window still writes one *heartbeat* row
(``queue == ""``, vp 0, V 1, zero counts) so the job can tell "idle" from
"missing". Files live under ``<stats_dir>/date=YYYY-MM-DD/`` (a Hive-style
partition column the job uses for pruning), one Parquet file per (node, window).

This module holds the schema in both forms (pyarrow for writers, Spark for the
job; pyspark is imported only by ``spark_schema()``), row validation and the
file-naming rules. Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from vpq.isolation.context import check_name
from vpq.virtual_partitions.hashing import check_virtual_partitions
from vpq.virtual_partitions.placement import check_queue_name

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

COLUMNS: tuple[str, ...] = (
    "window_start_ms",
    "window_ms",
    "node_id",
    "queue",
    "vp",
    "virtual_partitions",
    "lane",
    "env",
    "messages",
    "bytes",
)

ARROW_SCHEMA = pa.schema(
    [
        pa.field("window_start_ms", pa.int64(), nullable=False),
        pa.field("window_ms", pa.int64(), nullable=False),
        pa.field("node_id", pa.string(), nullable=False),
        pa.field("queue", pa.string(), nullable=False),
        pa.field("vp", pa.int32(), nullable=False),
        pa.field("virtual_partitions", pa.int64(), nullable=False),
        pa.field("lane", pa.string(), nullable=False),
        pa.field("env", pa.string(), nullable=False),
        pa.field("messages", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
    ]
)
"""The pyarrow schema of a stats file (column order = ``COLUMNS``)."""

HEARTBEAT_QUEUE = ""
"""The ``queue`` value of a heartbeat row (never a valid queue name)."""

DATE_PARTITION = "date"
"""The Hive partition column of the stats directory layout."""

NODE_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")
_FILE_RE = re.compile(r"(?P<node>[A-Za-z0-9._-]{1,128})-w(?P<start>\d+)-(?P<len>\d+)\.parquet")


def spark_schema() -> StructType:
    """The Spark schema of a stats file (same columns and order as ``ARROW_SCHEMA``;
    the ``date`` partition column is added by Spark's partition discovery)."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    long_, str_ = LongType(), StringType()
    types = {
        "window_start_ms": long_,
        "window_ms": long_,
        "node_id": str_,
        "queue": str_,
        "vp": IntegerType(),
        "virtual_partitions": long_,
        "lane": str_,
        "env": str_,
        "messages": long_,
        "bytes": long_,
    }
    return StructType([StructField(c, types[c], nullable=False) for c in COLUMNS])


def check_node_id(node_id: object) -> str:
    """Return ``node_id`` when valid (``[A-Za-z0-9._-]{1,128}``), else ValueError."""
    if not isinstance(node_id, str) or not NODE_ID_RE.fullmatch(node_id):
        raise ValueError(f"invalid node id {node_id!r}: must match [A-Za-z0-9._-]{{1,128}}")
    return node_id


def check_window(window_start_ms: object, window_ms: object) -> tuple[int, int]:
    """Validate a window: ``window_ms >= 1``, ``window_start_ms >= 0`` and aligned
    (a multiple of ``window_ms``, so windows of all nodes line up). ValueError otherwise."""
    for name, v in (("window_start_ms", window_start_ms), ("window_ms", window_ms)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"{name} must be an int, got {v!r}")
    assert isinstance(window_start_ms, int) and isinstance(window_ms, int)
    if window_ms < 1:
        raise ValueError(f"window_ms must be >= 1, got {window_ms}")
    if window_start_ms < 0 or window_start_ms % window_ms:
        raise ValueError(f"window_start_ms {window_start_ms} must be >= 0 and a multiple of window_ms {window_ms}")
    return window_start_ms, window_ms


@dataclass(frozen=True, slots=True)
class TrafficRow:
    """Traffic of one (queue, vp, lane, env) in one window, as a node counted it."""

    queue: str
    vp: int
    virtual_partitions: int
    lane: str = ""
    env: str = "prod"
    messages: int = 0
    bytes: int = 0

    @classmethod
    def counted(cls, queue: str, vp: int, virtual_partitions: int, lane: str, env: str, messages: int, nbytes: int) -> TrafficRow:
        """A row whose fields were validated already (``TrafficCounter`` checks each key the
        first time it sees it): built without checking them again."""
        row = object.__new__(cls)
        sq, svp, sv, sl, se, sm, sb = _ROW_SETTERS
        sq(row, queue)
        svp(row, vp)
        sv(row, virtual_partitions)
        sl(row, lane)
        se(row, env)
        sm(row, messages)
        sb(row, nbytes)
        return row

    def __post_init__(self) -> None:
        check_queue_name(self.queue)
        check_virtual_partitions(self.virtual_partitions)
        if not isinstance(self.vp, int) or isinstance(self.vp, bool) or not 0 <= self.vp < self.virtual_partitions:
            raise ValueError(f"vp {self.vp!r} out of range [0, {self.virtual_partitions}) for queue {self.queue!r}")
        check_name("lane", self.lane, "stats row")
        check_name("env", self.env, "stats row")
        for name in ("messages", "bytes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name} must be an int >= 0, got {v!r}")


_ROW_FIELDS = ("queue", "vp", "virtual_partitions", "lane", "env", "messages", "bytes")
# the slots' own setters: a frozen dataclass refuses setattr, its slot descriptors do not
_ROW_SETTERS = tuple(getattr(TrafficRow, name).__set__ for name in _ROW_FIELDS)


def to_arrow_table(window_start_ms: int, window_ms: int, node_id: str, rows: list[TrafficRow]) -> pa.Table:
    """The stats table for one (node, window). Empty ``rows`` give one heartbeat row."""
    check_window(window_start_ms, window_ms)
    check_node_id(node_id)
    if not rows:
        cols: dict[str, list[Any]] = {
            "queue": [HEARTBEAT_QUEUE], "vp": [0], "virtual_partitions": [1],
            "lane": [""], "env": [""], "messages": [0], "bytes": [0],
        }
    else:
        cols = {
            "queue": [r.queue for r in rows],
            "vp": [r.vp for r in rows],
            "virtual_partitions": [r.virtual_partitions for r in rows],
            "lane": [r.lane for r in rows],
            "env": [r.env for r in rows],
            "messages": [r.messages for r in rows],
            "bytes": [r.bytes for r in rows],
        }
    n = len(cols["queue"])
    cols["window_start_ms"] = [window_start_ms] * n
    cols["window_ms"] = [window_ms] * n
    cols["node_id"] = [node_id] * n
    return pa.Table.from_pydict({c: cols[c] for c in COLUMNS}, schema=ARROW_SCHEMA)


def date_of(window_start_ms: int) -> str:
    """The ``YYYY-MM-DD`` (UTC) date partition a window belongs to."""
    return dt.datetime.fromtimestamp(window_start_ms / 1000.0, tz=dt.timezone.utc).strftime("%Y-%m-%d")


def file_name(node_id: str, window_start_ms: int, window_ms: int) -> str:
    """The file name of one (node, window): ``<node>-w<start>-<len>.parquet``."""
    check_node_id(node_id)
    check_window(window_start_ms, window_ms)
    return f"{node_id}-w{window_start_ms}-{window_ms}.parquet"


def parse_file_name(name: str) -> tuple[str, int, int] | None:
    """``(node_id, window_start_ms, window_ms)`` of a stats file name, or None for other files."""
    m = _FILE_RE.fullmatch(name)
    if m is None:
        return None
    return m.group("node"), int(m.group("start")), int(m.group("len"))
