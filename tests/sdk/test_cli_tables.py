"""The CLI's tables at 80 columns against the real gateway (a live platform): several
queues, traffic, a group with members in lanes and envs; ``--wide`` and ``-o json``."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from tests.sdk.conftest import ThreadedGateway
from vpq.cli.main import app
from vpq.cli.tables import compress_ranges, placement_by_pp
from vpq.sdk.sync import Client

runner = CliRunner()
WIDTH = 80


def vpq(gw: ThreadedGateway, *args: str, columns: int = WIDTH):  # type: ignore[no-untyped-def]
    env = {"COLUMNS": str(columns), "VPQ_URL": "", "VPQ_TOKEN": ""}
    res = runner.invoke(app, [*args, "--url", gw.url], env=env)
    assert res.exit_code == 0, res.output
    return res


def fits(text: str, width: int = WIDTH) -> None:
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, "\n".join(too_long)


@pytest.fixture
def busy(threaded_gateway: ThreadedGateway, q: str) -> dict[str, str]:
    """Three queues (one with a long name and 256 vps) with traffic, and group ``g`` on
    the first with members in the backbone, lane feat-a / env test, and set eu."""
    names = {"orders": q, "audit": q.replace("q-", "a-"), "long": f"payments-settlement-events-{q}"}
    with Client(threaded_gateway.platform.url) as c:
        c.put_queue(names["orders"], virtual_partitions=16)
        c.put_queue(names["audit"], ordering="none")
        c.put_queue(names["long"], virtual_partitions=256)
        c.produce(names["orders"], [{"value": {"n": i}, "key": f"k{i}"} for i in range(40)])
        c.produce(names["orders"], [{"value": i} for i in range(6)], lane="feat-a", env="test")
        c.produce(names["long"], [{"value": "x" * 200} for _ in range(30)])
        c.join(names["orders"], "g", consumer_id="c-backbone-0001")
        c.join(names["orders"], "g", consumer_id="c-feature-a-0001", lane="feat-a", env="test")
        c.join(names["orders"], "g", consumer_id="c-eu-cell-0001", set="eu")
    return names


def test_queues_fit_80_columns_in_human_units(threaded_gateway: ThreadedGateway, busy: dict[str, str]) -> None:
    out = vpq(threaded_gateway, "queues").stdout
    fits(out)
    header = next(line for line in out.splitlines() if "name" in line)
    for col in ("vps", "partitions", "msg/s"):
        assert col in header, header  # whole headers on one line, not folded letters
    assert busy["orders"] in out and busy["audit"] in out
    assert busy["long"][:12] in out  # the long name is cut with an ellipsis at worst
    raw = orjson.loads(vpq(threaded_gateway, "queues", "-o", "json").stdout)["queues"]
    created = {q["name"]: q["created_ms"] for q in raw}
    assert str(created[busy["orders"]]) not in out  # no raw Unix-ms timestamps
    assert "--wide" in out  # says what is hidden
    assert len(out.splitlines()) < 10 + len(raw)  # one line per queue, not a folded column of letters


def test_queues_wide_shows_every_column_and_json_is_the_raw_answer(
    threaded_gateway: ThreadedGateway, busy: dict[str, str]
) -> None:
    wide = vpq(threaded_gateway, "queues", "--wide").stdout
    header = next(line for line in wide.splitlines() if "name" in line)
    for col in ("vps", "partitions", "msg/s", "bytes/s", "messages", "ordering", "created", "visibility", "retention",
                "max msg", "epoch"):
        assert col in header, col
    assert any(len(line) > WIDTH for line in wide.splitlines())  # natural width, nothing folded
    assert "30 s" in wide and "forever" in wide and "1.0 MiB" in wide  # visibility, retention, max msg
    as_json = orjson.loads(vpq(threaded_gateway, "queues", "--output", "json").stdout)
    legacy = orjson.loads(vpq(threaded_gateway, "queues", "--json").stdout)
    assert [q["name"] for q in as_json["queues"]] == [q["name"] for q in legacy["queues"]]
    assert {busy["orders"], busy["long"]} <= {q["name"] for q in as_json["queues"]}
    orders = next(q for q in as_json["queues"] if q["name"] == busy["orders"])
    assert orders["traffic"]["messages_total"] == 46 and isinstance(orders["created_ms"], int)


def test_queue_detail_fits_with_256_vps(threaded_gateway: ThreadedGateway, busy: dict[str, str]) -> None:
    out = vpq(threaded_gateway, "queues", busy["long"]).stdout
    fits(out)
    assert "placement" in out and "1.0 MiB" in out and "30 s" in out and "traffic" in out
    wide = vpq(threaded_gateway, "queues", busy["long"], "-w").stdout
    raw = orjson.loads(vpq(threaded_gateway, "queues", busy["long"], "-o", "json").stdout)
    lists = [compress_ranges(vps) for vps in placement_by_pp(raw["placement"]).values()]
    assert all(text in wide for text in lists)  # whole with --wide
    assert "…" in out and not all(text in out for text in lists)  # ~64 vps per pp: cut at 80


def test_group_fits_80_columns(threaded_gateway: ThreadedGateway, busy: dict[str, str]) -> None:
    out = vpq(threaded_gateway, "groups", busy["orders"], "g").stdout
    fits(out)
    assert "members (3)" in out
    for text in ("c-backbone-0001", "c-feature-a-0001", "c-eu-cell-0001", "feat-a", "test", "(backbone)", "in flight"):
        assert text in out, text
    lag = orjson.loads(vpq(threaded_gateway, "groups", busy["orders"], "g", "-o", "json").stdout)["lag"]
    assert lag["total"] == 46 and lag["by_lane"] == {"": 40, "feat-a": 6}
    lines = [line for line in out.splitlines() if "│ vp " in line and "more" not in line]
    assert len(lines) == 5 and "more: --wide" in out  # the five most lagging vps of 16
    wide = vpq(threaded_gateway, "groups", busy["orders"], "g", "--wide").stdout
    assert len([line for line in wide.splitlines() if "│ vp " in line]) == sum(1 for n in lag["by_virtual_partition"].values())


def test_cluster_fits_80_columns(threaded_gateway: ThreadedGateway, busy: dict[str, str]) -> None:
    out = vpq(threaded_gateway, "cluster", "--map").stdout
    fits(out)
    for text in ("write nodes (1)", "read nodes (1)", "physical partitions (4)", "messages", "size", busy["orders"]):
        assert text in out, text
    assert " B " in out or "KiB" in out  # partition sizes in human units
    raw = orjson.loads(vpq(threaded_gateway, "cluster", "-o", "json").stdout)
    assert {"write_nodes", "read_nodes", "physical_partitions", "epoch"} <= set(raw)


def test_produce_and_consume_take_output_json(threaded_gateway: ThreadedGateway, q: str) -> None:
    vpq(threaded_gateway, "create-queue", q, "--virtual-partitions", "1")
    produced = orjson.loads(vpq(threaded_gateway, "produce", q, "1", "2", "-o", "json").stdout)["results"]
    assert [r["virtual_partition"] for r in produced] == [0, 0]
    table = vpq(threaded_gateway, "produce", q, "3").stdout
    fits(table)
    assert "produced (1)" in table and "virtual partition" in table
    lines = vpq(threaded_gateway, "consume", q, "-g", "g", "--wait-ms", "300", "-o", "json").stdout.splitlines()
    assert [orjson.loads(line)["value"] for line in lines] == [1, 2, 3]


def test_cluster_wide_shows_node_meta_and_offsets(threaded_gateway: ThreadedGateway, busy: dict[str, str]) -> None:
    wide = vpq(threaded_gateway, "cluster", "--wide").stdout
    for text in ("start offset", "end offset", "meta", '"pid"', "reachable"):
        assert text in wide, text
