"""The CLI's pure formatting: human units (cli/humanize.py) and column fitting (cli/columns.py)."""

from __future__ import annotations

from vpq.cli import humanize as h
from vpq.cli.columns import Column, auto_cell, fit, table_width

NOW = 1_800_000_000_000


def test_counts_and_rates() -> None:
    assert [h.count(v) for v in (0, 7, 999, 1000, 1234, 12_345.6, 999_999, 5_600_000, 2.5e9)] == [
        "0", "7", "999", "1k", "1.2k", "12.3k", "1M", "5.6M", "2.5G"
    ]
    assert h.count(5.5) == "5.5" and h.count(0.01) == "0.01" and h.count(None) == "-" and h.count("n/a") == "n/a"
    assert h.rate(1234.5, "msg/s") == "1.2k msg/s" and h.rate(None) == "-"


def test_sizes() -> None:
    assert [h.size(v) for v in (0, 95, 1023, 1024, 3_565_158, 1 << 30, 12 * (1 << 40))] == [
        "0 B", "95 B", "1023 B", "1.0 KiB", "3.4 MiB", "1.0 GiB", "12 TiB"
    ]
    assert h.size(-1) == "unlimited" and h.byte_rate(3_565_158) == "3.4 MiB/s" and h.byte_rate(None) == "-"


def test_durations_and_ages() -> None:
    assert [h.duration_ms(v) for v in (0, 850, 1500, 30_000, 90_000, 7_200_000, 172_800_000)] == [
        "0 ms", "850 ms", "1.5 s", "30 s", "1.5 min", "2 h", "2 d"
    ]
    assert h.duration_ms(-1) == "forever" and h.duration_ms(-1, negative="off") == "off"
    assert h.age(NOW - 400, NOW) == "just now"
    assert h.age(NOW - 5_000, NOW) == "5 s ago"
    assert h.age(NOW - 190_000, NOW) == "3 min ago"
    assert h.age(NOW - 3 * 86_400_000, NOW) == "3 d ago"
    assert h.age(NOW + 5_000, NOW) == "in 5 s"
    assert h.age(None, NOW) == "-" and h.age(0, NOW) == "-"


def test_truncate() -> None:
    assert h.truncate("orders", 10) == "orders"
    assert h.truncate("payments-settlement", 10) == "payments-…" and len(h.truncate("x" * 50, 10)) == 10


def test_auto_cell_guesses_units_from_the_name() -> None:
    assert auto_cell("created_ms", NOW - 120_000, NOW) == "2 min ago"
    assert auto_cell("visibility_timeout_ms", 30_000, NOW) == "30 s"
    assert auto_cell("retention_ms", -1, NOW) == "forever"
    assert auto_cell("bytes_total", 2048, NOW) == "2.0 KiB"
    assert auto_cell("bytes_per_s", 2048, NOW) == "2.0 KiB/s"
    assert auto_cell("messages_per_s", 1500.0, NOW) == "1.5k msg/s"
    assert auto_cell("virtual_partitions", [0, 1, 2, 5], NOW) == "0-2,5"
    assert auto_cell("epoch", 7, NOW) == "7" and auto_cell("online", True, NOW) == "yes"


COLS = [
    Column("name", "name", 0, shrink=True, min_width=10),
    Column("vps", "vps", 0, right=True),
    Column("pps", "partitions", 1),
    Column("rate", "msg/s", 0, right=True),
    Column("bytes", "bytes", 3),
    Column("created", "created", 2),
]
ROW = {"name": "orders", "vps": "16", "pps": "0-3", "rate": "1.2k", "bytes": "3.4 MiB", "created": "3 min ago"}


def test_fit_keeps_everything_that_fits_and_wide_keeps_all() -> None:
    natural = fit(COLS, [ROW], 200)
    assert [c.key for c, _ in natural] == [c.key for c in COLS]
    assert dict((c.key, w) for c, w in natural)["created"] == len("3 min ago")
    assert table_width([w for _, w in natural]) == sum(w for _, w in natural) + 3 * 6 + 1
    assert [c.key for c, _ in fit(COLS, [ROW], 20, wide=True)] == [c.key for c in COLS]


def test_fit_drops_highest_priority_number_first_then_shrinks() -> None:
    full = table_width([w for _, w in fit(COLS, [ROW], 200)])
    one_less = fit(COLS, [ROW], full - 1)
    assert [c.key for c, _ in one_less] == ["name", "vps", "pps", "rate", "created"]  # bytes (3) went first
    narrow = fit(COLS, [ROW], 30)
    assert [c.key for c, _ in narrow] == ["name", "vps", "rate"]  # never the priority-0 columns
    long = dict(ROW, name="payments-settlement-events-eu-west-1")
    shrunk = fit(COLS, [long], 40)
    widths = {c.key: w for c, w in shrunk}
    assert table_width(list(widths.values())) <= 40 and widths["name"] >= 10
    assert [c.key for c, _ in shrunk] == ["name", "vps", "rate"]
