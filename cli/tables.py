"""Rendering of API answers as ``rich`` tables and one-line messages. No I/O: the
callers pass the console ``width``, ``wide`` (every column, cells folded rather than
cut) and ``now_ms`` (for "3 min ago").

By default a table shows the columns that matter in human units and fits ``width``
(``cli.columns.fit`` drops the less useful columns, then cuts long names with an
ellipsis); a caption says how many columns ``--wide`` would add. Fields the views do
not know (a richer server answer) are shown with ``--wide``, formatted by their name
(``cli.columns.auto_cell``).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from vpq.cli import humanize as h
from vpq.cli.columns import Column, auto_cell, cell, compress_ranges, fit, header_of
from vpq.sdk.models import Message, ProduceResult

__all__ = ["compress_ranges", "cell", "placement_by_pp", "queues_table", "queue_detail", "group_detail"]

Formatter = Callable[[Mapping[str, Any]], str]
Field = tuple[Column, Formatter]
EMPTY_LABELS = {"lane": "(backbone)", "set": "(default)", "env": "(none)"}
EXTRA_PRIORITY = 10
TOP_VPS = 5  # lag by virtual partition: the most lagging ones unless --wide


class View:
    """Rendering context: ``width`` of the console, ``wide`` mode, the clock."""

    def __init__(self, width: int = 80, wide: bool = False, now_ms: int = 0) -> None:
        self.width, self.wide, self.now_ms = width, wide, now_ms


def _get(*path: str, fmt: Callable[[Any], str] = cell) -> Formatter:
    def get(record: Mapping[str, Any]) -> str:
        value: Any = record
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        return fmt(value)

    return get


def _extras(records: Sequence[Mapping[str, Any]], known: set[str], view: View) -> list[Field]:
    keys: dict[str, None] = {}
    for r in records:
        for k in r:
            if k not in known:
                keys.setdefault(k, None)
    return [
        (
            Column(k, header_of(k), EXTRA_PRIORITY, right=all(h.is_number(r.get(k)) for r in records if k in r)),
            _get(k, fmt=lambda v, k=k: auto_cell(k, v, view.now_ms)),
        )
        for k in keys
    ]


def rows_table(
    title: str, fields: Sequence[Field], records: Sequence[Mapping[str, Any]], view: View, known: Sequence[str] = ()
) -> RenderableType:
    """One row per record; ``fields`` first, then (``--wide``) the records' other keys
    not in ``known``. No records: a one-line ``title: none``."""
    if not records:
        return Text(f"{title}: none")
    all_fields = list(fields) + _extras(records, set(known) | {c.key for c, _ in fields}, view)
    rows = [{c.key: fmt(r) for c, fmt in all_fields} for r in records]
    if not view.wide:  # a column with nothing in it says nothing
        all_fields = [(c, f) for c, f in all_fields if any(row[c.key] != h.DASH for row in rows)]
    chosen = fit([c for c, _ in all_fields], rows, view.width, view.wide)
    hidden = len(all_fields) - len(chosen)
    caption = f"{hidden} more column{'s' if hidden > 1 else ''}: --wide" if hidden else None
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="right")
    for c, w in chosen:
        table.add_column(
            c.header, justify="right" if c.right else "left",
            no_wrap=not view.wide, overflow="fold" if view.wide else "ellipsis",
        )
    for row in rows:
        table.add_row(*(row[c.key] if view.wide else h.truncate(row[c.key], w) for c, w in chosen))
    return table


def kv_table(title: str, pairs: Sequence[tuple[str, str]], view: View) -> Table:
    """Two columns, field and value; long values are cut unless ``--wide``."""
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column("field", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold" if view.wide else "ellipsis", no_wrap=not view.wide)
    for key, value in pairs:
        table.add_row(key, value)
    return table


def _auto_pairs(mapping: Mapping[str, Any], view: View, skip: Sequence[str] = ()) -> list[tuple[str, str]]:
    return [(header_of(k), auto_cell(k, v, view.now_ms)) for k, v in mapping.items() if k not in skip]


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


def _partitions(queue: Mapping[str, Any]) -> str:
    if "placement" not in queue:
        return h.DASH
    by_pp = placement_by_pp(queue["placement"])
    pps = [pp for pp in by_pp if isinstance(pp, int)]
    return compress_ranges(pps) if pps else cell(list(by_pp))


def queue_fields(view: View) -> list[Field]:
    """The queue list's columns, most useful first (priority: lower = kept longer)."""
    t = "traffic"
    return [
        (Column("name", "name", 0, shrink=True, min_width=10), _get("name")),
        (Column("vps", "vps", 0, right=True), _get("virtual_partitions")),
        (Column("pps", "partitions", 1, shrink=True, min_width=5), _partitions),
        (Column("msgs", "msg/s", 0, right=True), _get(t, "messages_per_s", fmt=h.count)),
        (Column("bps", "bytes/s", 2, right=True), _get(t, "bytes_per_s", fmt=h.byte_rate)),
        (Column("total", "messages", 3, right=True), _get(t, "messages_total", fmt=h.count)),
        (Column("ordering", "ordering", 4), _get("ordering")),
        (Column("created", "created", 5, right=True), _get("created_ms", fmt=lambda v: h.age(v, view.now_ms))),
        (Column("bytes", "bytes", 6, right=True), _get(t, "bytes_total", fmt=h.size)),
        (Column("deliv", "max deliv.", 7, right=True), _get("max_deliveries")),
        (Column("vis", "visibility", 7, right=True), _get("visibility_timeout_ms", fmt=h.duration_ms)),
        (Column("ret", "retention", 7, right=True), _get("retention_ms", fmt=h.duration_ms)),
        (Column("maxb", "max msg", 7, right=True), _get("max_message_bytes", fmt=h.size)),
        (Column("dedup", "dedup window", 7, right=True), _get("dedup_window_ms", fmt=lambda v: "off" if v == 0 else h.duration_ms(v))),
        (Column("updated", "updated", 8, right=True), _get("updated_ms", fmt=lambda v: h.age(v, view.now_ms))),
        (Column("since", "traffic since", 9, right=True), _get(t, "since_ms", fmt=lambda v: h.age(v, view.now_ms))),
        (Column("scope", "scope", 9), _get(t, "scope")),
    ]


QUEUE_KNOWN = (
    "name", "virtual_partitions", "placement", "traffic", "ordering", "created_ms", "max_deliveries",
    "visibility_timeout_ms", "retention_ms", "max_message_bytes", "dedup_window_ms", "updated_ms",
)


def queues_table(queues: Sequence[Mapping[str, Any]], view: View | None = None) -> RenderableType:
    """The queue list: name, vps, physical partitions, traffic, then the rest by priority."""
    view = view or View()
    return rows_table(f"queues ({len(queues)})", queue_fields(view), queues, view, QUEUE_KNOWN)


def queue_detail(queue: Mapping[str, Any], view: View | None = None) -> list[RenderableType]:
    """One queue: its config, its placement grouped by physical partition, its traffic."""
    view = view or View()
    out: list[RenderableType] = [
        kv_table(f"queue {queue.get('name', '')}".strip(), _auto_pairs(queue, view, ("placement", "traffic")), view)
    ]
    if "placement" in queue:
        groups = placement_by_pp(queue["placement"])
        order = sorted(groups, key=lambda p: (0, p, "") if isinstance(p, int) else (1, 0, str(p)))
        records = [{"pp": cell(pp), "vps": compress_ranges(groups[pp]), "count": len(groups[pp])} for pp in order]
        fields: list[Field] = [
            (Column("pp", "physical partition"), _get("pp")),
            (Column("count", "vps", 0, right=True), _get("count")),
            (Column("vps", "virtual partitions", 0, shrink=True, min_width=12), _get("vps")),
        ]
        out.append(rows_table("placement", fields, records, view, ("pp", "vps", "count")))
    traffic = queue.get("traffic")
    if isinstance(traffic, Mapping) and traffic:
        out.append(kv_table("traffic", _auto_pairs(traffic, view), view))
    return out


def lag_table(lag: Mapping[str, Any], view: View) -> Table:
    """Lag: the total, one row per lane / env / set value, the most lagging virtual
    partitions (all with ``--wide``), then other figures (oldest unacked age)."""
    table = Table(title="lag", title_justify="left")
    table.add_column("by", no_wrap=True)
    table.add_column("value", overflow="fold" if view.wide else "ellipsis", no_wrap=not view.wide)
    table.add_column("lag", justify="right", no_wrap=True)
    if "total" in lag:
        table.add_row("total", "", h.count(lag["total"]))
    for key, value in lag.items():
        if key == "total":
            continue
        dim = key.removeprefix("by_")
        if dim == "virtual_partition":
            dim = "vp"
        if isinstance(value, Mapping):
            items = sorted(value.items(), key=lambda kv: str(kv[0]))
            if dim == "vp":
                items = sorted(value.items(), key=lambda kv: (-(kv[1] if h.is_number(kv[1]) else 0), int(kv[0])))
                items = [kv for kv in items if view.wide or kv[1]]
                shown = items if view.wide else items[:TOP_VPS]
                for name, n in shown:
                    table.add_row(dim, str(name), h.count(n))
                if len(items) > len(shown):
                    table.add_row(dim, f"… {len(items) - len(shown)} more: --wide", "")
                continue
            for name, n in items:
                label = name if name != "" else EMPTY_LABELS.get(dim, '""')
                table.add_row(dim, label, h.count(n))
        else:
            table.add_row(header_of(key), "", auto_cell(key, value, view.now_ms))
    return table


def group_detail(group: Mapping[str, Any], view: View | None = None) -> list[RenderableType]:
    """A group: one summary line, its members (isolation context, vps, in flight), its lag."""
    view = view or View()
    members = group.get("members") or []
    fields: list[Field] = [
        (Column("consumer_id", "consumer", 0, shrink=True, min_width=10), _get("consumer_id")),
        (Column("lane", "lane", 0, shrink=True), _get("lane", fmt=lambda v: v or EMPTY_LABELS["lane"])),
        (Column("env", "env", 0, shrink=True, min_width=6), _get("env")),
        (Column("set", "set", 2, shrink=True), _get("set", fmt=lambda v: v or EMPTY_LABELS["set"])),
        (Column("vps", "vps", 0, right=True), lambda m: str(len(m.get("virtual_partitions") or []))),
        (Column("in_flight", "in flight", 0, right=True), _get("in_flight", fmt=h.count)),
        (Column("ranges", "assigned", 1, shrink=True, min_width=8), _get("virtual_partitions")),
    ]
    known = ("consumer_id", "lane", "env", "set", "virtual_partitions", "in_flight")
    out: list[RenderableType] = [rows_table(f"members ({len(members)})", fields, members, view, known)]
    lag = group.get("lag")
    if isinstance(lag, Mapping):
        out.append(lag_table(lag, view))
    elif lag is not None:
        out.append(Text(f"lag: {cell(lag)}"))
    rest = {k: v for k, v in group.items() if k not in ("members", "lag")}
    if rest:
        out.insert(0, Text(" · ".join(f"{header_of(k)} {auto_cell(k, v, view.now_ms)}" for k, v in rest.items())))
    return out


def _node_fields() -> list[Field]:
    return [
        (Column("id", "id", 0, shrink=True), _get("id")),
        (Column("address", "address", 0, shrink=True, min_width=15), _get("address")),
        (Column("reachable", "reachable", 1), _get("reachable")),
        (Column("meta", "meta", 9, shrink=True), _get("meta")),
    ]


def _names(value: Any) -> str:
    return ",".join(str(v) for v in value) if isinstance(value, list) else cell(value)


def _pp_fields() -> list[Field]:
    def messages(r: Mapping[str, Any]) -> str:
        start, end = r.get("start_offset"), r.get("end_offset")
        return h.count(end - start) if h.is_number(start) and h.is_number(end) else h.DASH

    return [
        (Column("id", "id", 0, right=True), _get("id")),
        (Column("owner", "owner", 0, shrink=True), _get("owner")),
        (Column("leader_epoch", "epoch", 2, right=True), _get("leader_epoch")),
        (Column("replicas", "replicas", 2, shrink=True), _get("replicas", fmt=_names)),
        (Column("in_sync_replicas", "in sync", 2, shrink=True), _get("in_sync_replicas", fmt=_names)),
        (Column("online", "online", 1), _get("online")),
        (Column("messages", "messages", 0, right=True), messages),
        (Column("bytes", "size", 0, right=True), _get("bytes", fmt=h.size)),
        (Column("start", "start offset", 3, right=True), _get("start_offset")),
        (Column("end", "end offset", 3, right=True), _get("end_offset")),
    ]


def cluster_detail(cluster: Mapping[str, Any], view: View | None = None) -> list[RenderableType]:
    """One summary line (epoch and other scalars), then one table per list (write
    nodes, read nodes, physical partitions, any other)."""
    view = view or View()
    out: list[RenderableType] = []
    scalars = {k: v for k, v in cluster.items() if not isinstance(v, (list, dict))}
    if scalars:
        out.append(Text(" · ".join(f"{header_of(k)} {auto_cell(k, v, view.now_ms)}" for k, v in scalars.items())))
    order = ["write_nodes", "read_nodes", "physical_partitions"]
    keys = [k for k in order if k in cluster] + [k for k in cluster if k not in order]
    for key in keys:
        value = cluster[key]
        if isinstance(value, list):
            rows = [v if isinstance(v, Mapping) else {"value": v} for v in value]
            fields = _pp_fields() if key == "physical_partitions" else _node_fields() if key.endswith("nodes") else []
            known = ("id", "owner", "online", "bytes", "start_offset", "end_offset", "address", "reachable", "meta")
            out.append(rows_table(f"{key.replace('_', ' ')} ({len(rows)})", fields, rows, view, known))
        elif isinstance(value, Mapping):
            out.append(kv_table(key.replace("_", " "), _auto_pairs(value, view), view))
    return out


def produce_results_table(results: Sequence[ProduceResult], view: View | None = None) -> RenderableType:
    fields: list[Field] = [
        (Column("id", "id", 0, shrink=True, min_width=12), _get("id")),
        (Column("partition", "partition", 0, right=True), _get("partition")),
        (Column("offset", "offset", 0, right=True), _get("offset")),
        (Column("virtual_partition", "virtual partition", 0, right=True), _get("virtual_partition")),
    ]
    records = [r.__dict__ for r in results]
    return rows_table(f"produced ({len(results)})", fields, records, view or View(), list(records[0]) if records else ())


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
