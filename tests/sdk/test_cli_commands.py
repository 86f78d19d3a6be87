"""The human CLI commands (cli/commands.py) via typer's CliRunner against the fake gateway."""

from __future__ import annotations

import orjson
import pytest
from typer.testing import CliRunner

from tests.sdk.fake_gateway import GatewayThread
from vpq.cli.commands import parse_headers, parse_value
from vpq.cli.main import app
from vpq.cli.tables import compress_ranges, message_line, placement_by_pp
from vpq.sdk.models import Message

runner = CliRunner()
ENV = {"COLUMNS": "200", "VPQ_URL": "", "VPQ_TOKEN": ""}


def vpq(gw: GatewayThread | str, *args: str, input: str | None = None):  # type: ignore[no-untyped-def]
    url = gw if isinstance(gw, str) else gw.url
    return runner.invoke(app, [*args, "--url", url], input=input, env=ENV)


def seed(gw: GatewayThread, queue: str = "orders", values: tuple[str, ...] = ("1", "2", "3")) -> None:
    assert vpq(gw, "create-queue", queue, "--virtual-partitions", "8").exit_code == 0
    assert vpq(gw, "produce", queue, *values).exit_code == 0


# -- pure helpers ------------------------------------------------------------------------


def test_value_and_header_parsing() -> None:
    assert parse_value("42") == 42
    assert parse_value('{"a": [1]}') == {"a": [1]}
    assert parse_value('"quoted"') == "quoted"
    assert parse_value("hello world") == "hello world"
    assert parse_headers(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(ValueError):
        parse_headers(["novalue"])


def test_table_helpers() -> None:
    assert compress_ranges([8, 0, 1, 2, 3, 10, 11]) == "0-3,8,10-11"
    assert compress_ranges([]) == ""
    assert placement_by_pp([0, 1, 0, 1]) == {0: [0, 2], 1: [1, 3]}
    assert placement_by_pp({"0": 2, "1": 2}) == {2: [0, 1]}
    assert placement_by_pp([{"vp": 0, "pp": 3}, {"vp": 1, "pp": 3}]) == {3: [0, 1]}
    msg = Message(id="m", queue="q", value={"a": 1}, key="k", lane="feat-a", env="test", partition=2, offset=7, virtual_partition=5)
    assert message_line(msg) == 'p2@7 vp=5 key=k lane=feat-a env=test {"a":1}'
    assert message_line(Message(id="m", queue="q", value=b"\x01", delivery_count=3)).endswith("dc=3 b64:AQ==")


# -- produce -------------------------------------------------------------------------------


def test_produce_values_with_key_headers_and_lane(threaded_gateway: GatewayThread) -> None:
    assert vpq(threaded_gateway, "create-queue", "orders").exit_code == 0
    res = vpq(threaded_gateway, "produce", "orders", "42", '{"a":1}', "hello", "-k", "o-1", "-H", "src=cli", "--lane", "feat-a")
    assert res.exit_code == 0, res.output
    gw = threaded_gateway.gateway
    stored = gw.logs["orders"]
    assert [m["value"] for m in stored] == [42, {"a": 1}, "hello"]
    assert {m["key"] for m in stored} == {"o-1"} and stored[0]["headers"] == {"src": "cli"}
    assert gw.requests_to("POST", "/v1/queues/orders/messages")[0].headers["X-Lane"] == "feat-a"
    assert "produced (3)" in res.stdout and stored[0]["id"] in res.stdout


def test_produce_from_stdin_and_file_with_json_output(threaded_gateway: GatewayThread, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert vpq(threaded_gateway, "create-queue", "q").exit_code == 0
    res = vpq(threaded_gateway, "produce", "q", "--json", input='{"n":1}\n\nplain text\n')
    assert res.exit_code == 0, res.output
    assert len(orjson.loads(res.stdout)["results"]) == 2
    path = tmp_path / "values.txt"
    path.write_text("\n".join(str(i) for i in range(30)) + "\n")
    res = vpq(threaded_gateway, "produce", "q", "--file", str(path), "--batch", "7")
    assert res.exit_code == 0, res.output
    assert "produced 30 messages to q" in res.stdout
    assert threaded_gateway.gateway.values("q") == [{"n": 1}, "plain text", *range(30)]
    assert len(threaded_gateway.gateway.requests_to("POST", "/v1/queues/q/messages")) == 1 + 5


def test_produce_errors_are_one_line_and_exit_1(threaded_gateway: GatewayThread) -> None:
    res = vpq(threaded_gateway, "produce", "missing", "1")
    assert res.exit_code == 1
    assert "queue 'missing' does not exist" in res.stderr and "queue_not_found" in res.stderr and "404" in res.stderr
    assert "Traceback" not in res.output
    res = vpq(threaded_gateway, "produce", "missing", "1", "-H", "nokv")
    assert res.exit_code == 1 and "k=v" in res.stderr
    res = vpq(threaded_gateway, "produce", "missing", input="\n\n")
    assert res.exit_code == 1 and "nothing to produce" in res.stderr


# -- consume -------------------------------------------------------------------------------


def test_consume_prints_lines_acks_and_leaves(threaded_gateway: GatewayThread) -> None:
    seed(threaded_gateway)
    res = vpq(threaded_gateway, "consume", "orders", "--group", "g", "--lane", "feat-a", "--env", "test", "--wait-ms", "0")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert [line.split()[-1] for line in lines] == ["1", "2", "3"]
    assert "3 message(s) from orders / g (acked)" in res.stderr
    gw = threaded_gateway.gateway
    join = gw.requests_to("POST", "/v1/queues/orders/groups/g/consumers")[0]
    assert join.body == {"lane": "feat-a", "env": "test", "start": "earliest"}
    group = gw.groups[("orders", "g")]
    assert len(group.acked) == 3 and group.members == {}


def test_consume_max_no_ack_and_json(threaded_gateway: GatewayThread) -> None:
    seed(threaded_gateway)
    res = vpq(threaded_gateway, "consume", "orders", "-g", "g", "--max", "2", "--no-ack", "--json", "--wait-ms", "0")
    assert res.exit_code == 0, res.output
    rows = [orjson.loads(line) for line in res.stdout.splitlines()]
    assert [r["value"] for r in rows] == [1, 2] and all(r["queue"] == "orders" for r in rows)
    group = threaded_gateway.gateway.groups[("orders", "g")]
    assert group.acked == set() and len(group.redeliver) == 2  # released on leave
    again = vpq(threaded_gateway, "consume", "orders", "-g", "g", "--wait-ms", "0")
    assert [line.split()[-1] for line in again.stdout.splitlines()] == ["1", "2", "3"]
    assert "dc=2" in again.stdout.splitlines()[0]


def test_consume_follow_stops_at_max(threaded_gateway: GatewayThread) -> None:
    seed(threaded_gateway, values=("1", "10", "11", "12"))
    res = vpq(threaded_gateway, "consume", "orders", "-g", "g", "--follow", "--max", "3")
    assert res.exit_code == 0, res.output
    assert [line.split()[-1] for line in res.stdout.splitlines()] == ["1", "10", "11"]
    polls = threaded_gateway.gateway.requests_to("POST", "/poll")
    assert polls[0].body == {"max_messages": 3, "wait_ms": 1000}


# -- admin views ---------------------------------------------------------------------------


def test_queues_list_and_detail(threaded_gateway: GatewayThread) -> None:
    seed(threaded_gateway, "orders")
    assert vpq(threaded_gateway, "create-queue", "audit", "--ordering", "none").exit_code == 0
    res = vpq(threaded_gateway, "queues")
    assert res.exit_code == 0, res.output
    assert "queues (2)" in res.stdout and "orders" in res.stdout and "audit" in res.stdout and "none" in res.stdout
    res = vpq(threaded_gateway, "queues", "orders")
    assert res.exit_code == 0, res.output
    assert "placement" in res.stdout and "0,4" in res.stdout  # pp 0 holds vps 0 and 4 of 8
    assert "traffic" in res.stdout
    raw = vpq(threaded_gateway, "queues", "orders", "--json")
    assert orjson.loads(raw.stdout)["traffic"]["messages_total"] == 3
    missing = vpq(threaded_gateway, "queues", "nope")
    assert missing.exit_code == 1 and "does not exist" in missing.stderr and "Traceback" not in missing.output


def test_create_queue_conflict_and_delete(threaded_gateway: GatewayThread) -> None:
    assert vpq(threaded_gateway, "create-queue", "q", "--virtual-partitions", "16").exit_code == 0
    res = vpq(threaded_gateway, "create-queue", "q", "--virtual-partitions", "4")
    assert res.exit_code == 1 and "may only grow" in res.stderr and "409" in res.stderr
    assert vpq(threaded_gateway, "delete-queue", "q", input="n\n").exit_code == 1
    res = vpq(threaded_gateway, "delete-queue", "q", "--yes")
    assert res.exit_code == 0 and "deleted q" in res.stdout
    assert threaded_gateway.gateway.queues == {}


def test_groups_members_and_lag(threaded_gateway: GatewayThread) -> None:
    seed(threaded_gateway)
    vpq(threaded_gateway, "produce", "orders", "9", "--lane", "feat-a")
    vpq(threaded_gateway, "consume", "orders", "-g", "g", "--max", "1", "--wait-ms", "0")
    threaded_gateway.call(lambda: threaded_gateway.gateway.groups[("orders", "g")].members.update(
        {"c-blue": {"lane": "feat-a", "env": "prod", "set": ""}}
    ))
    res = vpq(threaded_gateway, "groups", "orders", "g")
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "members (1)" in out and "c-blue" in out and "feat-a" in out
    assert "lag" in out and "(backbone)" in out and "total" in out
    lag = orjson.loads(vpq(threaded_gateway, "groups", "orders", "g", "--json").stdout)["lag"]
    assert lag["total"] == 3 and lag["by_lane"] == {"": 2, "feat-a": 1}


def test_cluster_tables_and_map(threaded_gateway: GatewayThread) -> None:
    seed(threaded_gateway)
    res = vpq(threaded_gateway, "cluster", "--map")
    assert res.exit_code == 0, res.output
    out = res.stdout
    for text in ("write nodes (1)", "read nodes (1)", "physical partitions (4)", "w0", "r0", "epoch", "map epoch 1", "orders"):
        assert text in out, text
    assert orjson.loads(vpq(threaded_gateway, "cluster", "--json").stdout)["epoch"] == 1


def test_gateway_down_says_so_and_exits_1(dead_url: str) -> None:
    for args in (("cluster",), ("queues",), ("produce", "q", "1"), ("consume", "q"), ("groups", "q", "g")):
        res = vpq(dead_url, *args)
        assert res.exit_code == 1, args
        assert f"the gateway is not running at {dead_url}" in res.stderr
        assert "Traceback" not in res.output
