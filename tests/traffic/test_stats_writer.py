"""Stats schema and StatsWriter: validation, atomic files, heartbeats, retention."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from vpq.traffic.stats_schema import (
    ARROW_SCHEMA,
    COLUMNS,
    HEARTBEAT_QUEUE,
    TrafficRow,
    check_window,
    date_of,
    file_name,
    parse_file_name,
    spark_schema,
    to_arrow_table,
)
from vpq.traffic.stats_writer import StatsWriter

DAY = 24 * 3600 * 1000
W = 10_000
T0 = 1_700_000_000_000 // W * W


def test_arrow_and_spark_schemas_agree() -> None:
    sp = spark_schema()
    assert tuple(ARROW_SCHEMA.names) == COLUMNS == tuple(f.name for f in sp.fields)
    kinds = {f.name: f.dataType.simpleString() for f in sp.fields}
    assert kinds["vp"] == "int" and kinds["window_start_ms"] == "bigint" and kinds["queue"] == "string"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"queue": "bad name", "vp": 0, "virtual_partitions": 4},
        {"queue": "q", "vp": 4, "virtual_partitions": 4},
        {"queue": "q", "vp": 0, "virtual_partitions": 3},
        {"queue": "q", "vp": 0, "virtual_partitions": 4, "lane": "UPPER"},
        {"queue": "q", "vp": 0, "virtual_partitions": 4, "messages": -1},
        {"queue": "q", "vp": 0, "virtual_partitions": 4, "bytes": 1.5},
    ],
)
def test_traffic_row_rejects_bad_values(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        TrafficRow(**kwargs)


def test_windows_must_be_aligned() -> None:
    assert check_window(T0, W) == (T0, W)
    with pytest.raises(ValueError):
        check_window(T0 + 1, W)
    with pytest.raises(ValueError):
        check_window(T0, 0)


def test_file_names_round_trip_even_with_dashes_in_node_ids() -> None:
    for node in ("w0", "node-w1-2", "a.b_c"):
        assert parse_file_name(file_name(node, T0, W)) == (node, T0, W)
    assert parse_file_name(".tmp-w0-abc.parquet") is None
    assert parse_file_name("w0-w12.parquet") is None


def test_empty_window_is_one_heartbeat_row() -> None:
    t = to_arrow_table(T0, W, "w0", [])
    assert t.num_rows == 1
    row = t.to_pylist()[0]
    assert row["queue"] == HEARTBEAT_QUEUE and row["messages"] == 0 and row["node_id"] == "w0"


def test_write_window_is_readable_and_replaces_same_window(tmp_path) -> None:
    w = StatsWriter(tmp_path / "stats", "w0")
    with pytest.raises(RuntimeError):
        w.write_window(T0, W, [])
    w.start()
    rows = [TrafficRow("orders", 3, 8, "feat-a", "test", 10, 1000), TrafficRow("pay", 0, 1, messages=1, bytes=7)]
    path = w.write_window(T0, W, rows)
    assert path.parent.name == f"date={date_of(T0)}"
    table = pq.read_table(path)
    assert table.schema.equals(ARROW_SCHEMA)
    got = table.to_pylist()
    assert [(r["queue"], r["vp"], r["virtual_partitions"], r["lane"], r["env"], r["messages"], r["bytes"]) for r in got] == [
        ("orders", 3, 8, "feat-a", "test", 10, 1000),
        ("pay", 0, 1, "", "prod", 1, 7),
    ]
    assert {r["window_start_ms"] for r in got} == {T0} and {r["node_id"] for r in got} == {"w0"}
    w.write_window(T0, W, [TrafficRow("orders", 0, 8, messages=5, bytes=5)])
    assert pq.read_table(path).num_rows == 1
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind
    w.stop()


def test_invalid_rows_write_nothing(tmp_path) -> None:
    w = StatsWriter(tmp_path, "w0")
    w.start()
    with pytest.raises(ValueError):
        w.write_window(T0 + 1, W, [])
    assert w.own_files() == []


def test_prune_deletes_only_own_old_files_and_empty_old_days(tmp_path) -> None:
    mine = StatsWriter(tmp_path, "w0", retention_ms=DAY)
    other = StatsWriter(tmp_path, "w1", retention_ms=DAY)
    mine.start()
    other.start()
    old, recent = T0 - 3 * DAY, T0
    mine.write_window(old, W, [])
    other.write_window(old, W, [])
    mine.write_window(recent, W, [])
    stray = mine.path_for(recent, W).parent / ".tmp-w0-0123456789abcdef0123456789abcdef.parquet"
    stray.write_bytes(b"partial")
    foreign_tmp = mine.path_for(recent, W).parent / ".tmp-w0-x-0123456789abcdef0123456789abcdef.parquet"
    foreign_tmp.write_bytes(b"partial")
    assert mine.prune(recent + W) == 1
    assert [s for s, _, _ in mine.own_files()] == [recent]
    assert [s for s, _, _ in other.own_files()] == [old]  # other nodes prune their own
    assert not stray.exists() and foreign_tmp.exists()
    other.prune(recent + W)
    assert not mine.path_for(old, W).parent.exists()  # empty old date directory removed
