"""Rendering of API answers as ``rich`` tables and one-line messages. Pure: no I/O.

The gateway's answers for queues, groups and the cluster carry the fields API.md names,
possibly more; these renderers show the known fields first and any others after them,
so a richer server answer is displayed rather than dropped.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from vpq.sdk.models import Message, ProduceResult

QUEUE_COLUMNS = (
    "name",
    "virtual_partitions",
    "ordering",
    "max_deliveries",
    "visibility_timeout_ms",
    "retention_ms",
    "max_message_bytes",
)
SHORT_HEADERS = {
    "virtual_partitions": "vps",
    "max_deliveries": "max deliv.",
    "visibility_timeout_ms": "visibility ms",
    "retention_ms": "retention ms",
    "max_message_bytes": "max msg bytes",
    "session_timeout_ms": "session ms",
    "partitions": "pps",
}
EMPTY_LABELS = {"lane": "(backbone)", "set": "(default)", "env": "(none)"}


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
    """A table cell: integer lists as ranges, other containers as compact JSON."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return compress_ranges(value)
    if isinstance(value, (list, dict)):
        return orjson.dumps(value).decode()
    if value == "":
        return '""'
    return str(value)


def _columns(rows: Sequence[Mapping[str, Any]], preferred: Sequence[str] = ()) -> list[str]:
    present: dict[str, None] = {}
    for row in rows:
        for key in row:
            present.setdefault(key, None)
    first = [c for c in preferred if c in present]
    return first + [c for c in present if c not in first]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def rows_table(title: str, rows: Sequence[Mapping[str, Any]], preferred: Sequence[str] = ()) -> RenderableType:
    """A table with one row per mapping; columns are the union of the keys (numbers
    right-aligned). No rows: a one-line ``title: none``."""
    if not rows:
        return Text(f"{title}: none")
    table = Table(title=title, title_justify="left")
    columns = _columns(rows, preferred)
    for col in columns:
        numeric = all(_is_number(row.get(col)) for row in rows if row.get(col) is not None)
        table.add_column(
            SHORT_HEADERS.get(col, col.replace("_", " ")), overflow="fold", justify="right" if numeric else "left"
        )
    for row in rows:
        table.add_row(*(cell(row.get(col)) for col in columns))
    return table


def kv_table(title: str, mapping: Mapping[str, Any]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in mapping.items():
        table.add_row(key, cell(value))
    return table


def placement_by_pp(placement: Any) -> dict[Any, list[int]]:
    """Physical partition -> its virtual partitions, from a placement given as a list
    (pp of vp i at index i), a mapping vp -> pp, or a list of ``{vp, pp}`` objects."""
    out: dict[Any, list[int]] = {}
    if isinstance(placement, Mapping):
        pairs = [(int(vp), pp) for vp, pp in placement.items()]
    elif isinstance(placement, list):
        pairs = []
        for i, item in enumerate(placement):
            if isinstance(item, Mapping):
                vp = item.get("virtual_partition", item.get("vp", i))
                pp = item.get("partition", item.get("pp", item.get("physical_partition")))
                pairs.append((int(vp), pp))
            else:
                pairs.append((i, item))
    else:
        return out
    for vp, pp in pairs:
        out.setdefault(pp, []).append(vp)
    return out


def queues_table(queues: Sequence[Mapping[str, Any]]) -> RenderableType:
    """The queue list: config columns, the physical partitions used, scalar traffic figures."""
    rows: list[dict[str, Any]] = []
    for q in queues:
        row = {k: v for k, v in q.items() if k not in ("placement", "traffic")}
        if "placement" in q:
            pps = [pp for pp in placement_by_pp(q["placement"]) if isinstance(pp, int)]
            row["partitions"] = compress_ranges(pps) if pps else cell(list(placement_by_pp(q["placement"])))
        traffic = q.get("traffic")
        if isinstance(traffic, Mapping):
            row.update({k: v for k, v in traffic.items() if not isinstance(v, (dict, list))})
        rows.append(row)
    return rows_table(f"queues ({len(rows)})", rows, QUEUE_COLUMNS)


def queue_detail(queue: Mapping[str, Any]) -> list[RenderableType]:
    """One queue: its config, its placement grouped by physical partition, its traffic."""
    out: list[RenderableType] = []
    config = {k: v for k, v in queue.items() if k not in ("placement", "traffic")}
    out.append(kv_table(f"queue {queue.get('name', '')}".strip(), config))
    if "placement" in queue:
        table = Table(title="placement", title_justify="left")
        table.add_column("physical partition")
        table.add_column("virtual partitions", overflow="fold")
        table.add_column("count", justify="right")
        groups = placement_by_pp(queue["placement"])
        for pp in sorted(groups, key=lambda p: (0, p, "") if isinstance(p, int) else (1, 0, str(p))):
            table.add_row(cell(pp), compress_ranges(groups[pp]), str(len(groups[pp])))
        out.append(table)
    traffic = queue.get("traffic")
    if isinstance(traffic, Mapping) and traffic:
        out.append(_traffic(traffic))
    return out


def _traffic(traffic: Mapping[str, Any]) -> RenderableType:
    lists = {k: v for k, v in traffic.items() if isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v)}
    if len(lists) == 1 and len(traffic) == 1:
        key, rows = next(iter(lists.items()))
        return rows_table(f"traffic ({key})", rows)
    return kv_table("traffic", traffic)


def lag_table(lag: Mapping[str, Any]) -> Table:
    """Lag: the total, then one row per lane / env / set value."""
    table = Table(title="lag", title_justify="left")
    table.add_column("by")
    table.add_column("value", overflow="fold")
    table.add_column("lag", justify="right")
    if "total" in lag:
        table.add_row("total", "", cell(lag["total"]))
    for key, value in lag.items():
        if key == "total":
            continue
        dim = key.removeprefix("by_")
        if isinstance(value, Mapping):
            for name, n in sorted(value.items(), key=lambda kv: str(kv[0])):
                label = name if name != "" else EMPTY_LABELS.get(dim, '""')
                table.add_row(dim, label, cell(n))
        else:
            table.add_row(dim, "", cell(value))
    return table


def group_detail(group: Mapping[str, Any]) -> list[RenderableType]:
    members = group.get("members") or []
    out: list[RenderableType] = [
        rows_table(
            f"members ({len(members)})",
            members,
            ("consumer_id", "lane", "env", "set", "virtual_partitions", "assigned", "in_flight"),
        )
    ]
    lag = group.get("lag")
    if isinstance(lag, Mapping):
        out.append(lag_table(lag))
    elif lag is not None:
        out.append(Text(f"lag: {cell(lag)}"))
    rest = {k: v for k, v in group.items() if k not in ("members", "lag")}
    if rest:
        out.insert(0, kv_table("group", rest))
    return out


def cluster_detail(cluster: Mapping[str, Any]) -> list[RenderableType]:
    """The epoch and other scalars first, then one table per list (nodes, partitions)."""
    out: list[RenderableType] = []
    scalars = {k: v for k, v in cluster.items() if not isinstance(v, (list, dict))}
    if scalars:
        out.append(kv_table("cluster", scalars))
    order = ["write_nodes", "read_nodes", "physical_partitions"]
    keys = [k for k in order if k in cluster] + [k for k in cluster if k not in order]
    for key in keys:
        value = cluster[key]
        if isinstance(value, list):
            rows = [v if isinstance(v, Mapping) else {"value": v} for v in value]
            out.append(rows_table(f"{key.replace('_', ' ')} ({len(rows)})", rows, ("id", "owner", "address")))
        elif isinstance(value, Mapping):
            out.append(kv_table(key.replace("_", " "), value))
    return out


def produce_results_table(results: Sequence[ProduceResult]) -> Table:
    table = Table(title=f"produced ({len(results)})", title_justify="left")
    table.add_column("id", overflow="fold")
    for col in ("partition", "offset", "virtual partition"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(r.id, str(r.partition), str(r.offset), str(r.virtual_partition))
    return table


def value_text(value: Any) -> str:
    """A message value on one line: JSON, or ``b64:...`` for bytes."""
    if isinstance(value, bytes):
        return "b64:" + base64.b64encode(value).decode("ascii")
    return orjson.dumps(value).decode()


def message_line(msg: Message) -> str:
    """``p3@1234 vp=7 key=order-42 lane=feat-a env=test dc=1 {"any":"json"}``; empty
    lane/set and the default env are left out."""
    parts = [f"p{msg.partition}@{msg.offset}", f"vp={msg.virtual_partition}"]
    if msg.key is not None:
        parts.append(f"key={msg.key}")
    if msg.lane:
        parts.append(f"lane={msg.lane}")
    if msg.env and msg.env != "prod":
        parts.append(f"env={msg.env}")
    if msg.set:
        parts.append(f"set={msg.set}")
    if msg.delivery_count != 1:
        parts.append(f"dc={msg.delivery_count}")
    if msg.headers:
        parts.append("headers=" + orjson.dumps(msg.headers).decode())
    parts.append(value_text(msg.value))
    return " ".join(parts)
