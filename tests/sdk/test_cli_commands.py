"""The human CLI commands (cli/commands.py) via typer's CliRunner against the real gateway
(a live platform, through a recording proxy served from the platform's thread)."""

from __future__ import annotations

import time

import orjson
import pytest
from typer.testing import CliRunner

from tests.sdk.conftest import ThreadedGateway, read_back
from vpq.cli.commands import parse_headers, parse_value
from vpq.cli.main import app
from vpq.cli.tables import compress_ranges, message_line, placement_by_pp
from vpq.sdk.models import Message
from vpq.sdk.sync import Client

runner = CliRunner()
ENV = {"COLUMNS": "200", "VPQ_URL": "", "VPQ_TOKEN": ""}
WAIT = "300"  # long-poll wait of one-shot consumes: messages come at once, the last empty poll ends it


def vpq(gw: ThreadedGateway | str, *args: str, input: str | None = None):  # type: ignore[no-untyped-def]
    url = gw if isinstance(gw, str) else gw.url
    return runner.invoke(app, [*args, "--url", url], input=input, env=ENV)


def seed(gw: ThreadedGateway, queue: str, values: tuple[str, ...] = ("1", "2", "3"), *context: str) -> None:
    """``queue`` with one vp (consumed in produce order) holding ``values``."""
    assert vpq(gw, "create-queue", queue, "--virtual-partitions", "1").exit_code == 0
    assert vpq(gw, "produce", queue, *values, *context).exit_code == 0


def stored(gw: ThreadedGateway, queue: str, n: int, env: str = "prod") -> list[Message]:
    return gw.platform.run(read_back(gw.platform.url, queue, n, env))


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


def test_produce_values_with_key_headers_and_lane(threaded_gateway: ThreadedGateway, q: str) -> None:
    assert vpq(threaded_gateway, "create-queue", q).exit_code == 0
    res = vpq(threaded_gateway, "produce", q, "42", '{"a":1}', "hello", "-k", "o-1", "-H", "src=cli", "--lane", "feat-a")
    assert res.exit_code == 0, res.output
    gw = threaded_gateway.proxy
    messages = stored(threaded_gateway, q, 3)  # one key: one vp, in produce order
    assert [m.value for m in messages] == [42, {"a": 1}, "hello"]
    assert {m.key for m in messages} == {"o-1"} and messages[0].headers == {"src": "cli"}
    assert {m.lane for m in messages} == {"feat-a"}
    assert gw.requests_to("POST", f"/v1/queues/{q}/messages")[0].headers["X-Lane"] == "feat-a"
    assert "produced (3)" in res.stdout and messages[0].id in res.stdout


def test_produce_from_stdin_and_file_with_json_output(threaded_gateway: ThreadedGateway, q: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert vpq(threaded_gateway, "create-queue", q, "--virtual-partitions", "1").exit_code == 0
    res = vpq(threaded_gateway, "produce", q, "--json", input='{"n":1}\n\nplain text\n')
    assert res.exit_code == 0, res.output
    assert len(orjson.loads(res.stdout)["results"]) == 2
    path = tmp_path / "values.txt"
    path.write_text("\n".join(str(i) for i in range(30)) + "\n")
    res = vpq(threaded_gateway, "produce", q, "--file", str(path), "--batch", "7")
    assert res.exit_code == 0, res.output
    assert f"produced 30 messages to {q}" in res.stdout
    assert [m.value for m in stored(threaded_gateway, q, 32)] == [{"n": 1}, "plain text", *range(30)]
    assert len(threaded_gateway.proxy.requests_to("POST", f"/v1/queues/{q}/messages")) == 1 + 5


def test_produce_errors_are_one_line_and_exit_1(threaded_gateway: ThreadedGateway, q: str) -> None:
    res = vpq(threaded_gateway, "produce", q, "1")
    assert res.exit_code == 1
    assert f"queue '{q}' does not exist" in res.stderr and "queue_not_found" in res.stderr and "404" in res.stderr
    assert "Traceback" not in res.output
    res = vpq(threaded_gateway, "produce", q, "1", "-H", "nokv")
    assert res.exit_code == 1 and "k=v" in res.stderr
    res = vpq(threaded_gateway, "produce", q, input="\n\n")
    assert res.exit_code == 1 and "nothing to produce" in res.stderr


# -- consume -------------------------------------------------------------------------------


def test_consume_prints_lines_acks_and_leaves(threaded_gateway: ThreadedGateway, q: str) -> None:
    seed(threaded_gateway, q, ("1", "2", "3"), "--lane", "feat-a", "--env", "test")
    res = vpq(threaded_gateway, "consume", q, "--group", "g", "--lane", "feat-a", "--env", "test", "--wait-ms", WAIT)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert [line.split()[-1] for line in lines] == ["1", "2", "3"]
    assert f"3 message(s) from {q} / g (acked)" in res.stderr
    gw = threaded_gateway.proxy
    join = gw.requests_to("POST", f"/v1/queues/{q}/groups/g/consumers")[0]
    assert join.body == {"lane": "feat-a", "env": "test", "start": "earliest"}
    with Client(threaded_gateway.platform.url) as c:
        group = c.group(q, "g")
    assert group["lag"]["total"] == 0 and group["members"] == []


def test_consume_max_no_ack_and_json(threaded_gateway: ThreadedGateway, q: str) -> None:
    seed(threaded_gateway, q)
    res = vpq(threaded_gateway, "consume", q, "-g", "g", "--max", "2", "--no-ack", "--json", "--wait-ms", WAIT)
    assert res.exit_code == 0, res.output
    rows = [orjson.loads(line) for line in res.stdout.splitlines()]
    assert [r["value"] for r in rows] == [1, 2] and all(r["queue"] == q for r in rows)
    assert not threaded_gateway.proxy.requests_to("POST", "/ack")
    again = vpq(threaded_gateway, "consume", q, "-g", "g", "--wait-ms", WAIT)  # released on leave
    assert sorted(line.split()[-1] for line in again.stdout.splitlines()) == ["1", "2", "3"]
    counts = {line.split()[-1]: "dc=2" in line for line in again.stdout.splitlines()}
    assert counts == {"1": True, "2": True, "3": False}


def test_consume_follow_stops_at_max(threaded_gateway: ThreadedGateway, q: str) -> None:
    seed(threaded_gateway, q, ("1", "10", "11", "12"))
    res = vpq(threaded_gateway, "consume", q, "-g", "g", "--follow", "--max", "3")
    assert res.exit_code == 0, res.output
    assert [line.split()[-1] for line in res.stdout.splitlines()] == ["1", "10", "11"]
    polls = threaded_gateway.proxy.requests_to("POST", "/poll")
    assert polls[0].body == {"max_messages": 3, "wait_ms": 1000}


# -- admin views ---------------------------------------------------------------------------


def test_queues_list_and_detail(threaded_gateway: ThreadedGateway, q: str) -> None:
    orders, audit = q, q.replace("q-", "a-")  # short names: the table does not wrap them
    assert vpq(threaded_gateway, "create-queue", orders, "--virtual-partitions", "8").exit_code == 0
    assert vpq(threaded_gateway, "produce", orders, "1", "2", "3").exit_code == 0
    assert vpq(threaded_gateway, "create-queue", audit, "--ordering", "none").exit_code == 0
    res = vpq(threaded_gateway, "queues")
    assert res.exit_code == 0, res.output
    assert "queues (" in res.stdout and orders in res.stdout and audit in res.stdout and "none" in res.stdout
    res = vpq(threaded_gateway, "queues", orders)
    assert res.exit_code == 0, res.output
    raw = orjson.loads(vpq(threaded_gateway, "queues", orders, "--json").stdout)
    by_pp = placement_by_pp(raw["placement"])
    assert sorted(v for vps in by_pp.values() for v in vps) == list(range(8))
    assert "placement" in res.stdout and all(compress_ranges(vps) in res.stdout for vps in by_pp.values())
    assert "traffic" in res.stdout
    assert raw["traffic"]["messages_total"] == 3
    missing = vpq(threaded_gateway, "queues", f"{orders}-nope")
    assert missing.exit_code == 1 and "does not exist" in missing.stderr and "Traceback" not in missing.output


def test_create_queue_sets_the_dedup_window(threaded_gateway: ThreadedGateway, q: str) -> None:
    res = vpq(threaded_gateway, "create-queue", q, "--dedup-window-ms", "0", "--json")
    assert res.exit_code == 0, res.output
    assert orjson.loads(res.stdout)["dedup_window_ms"] == 0
    res = vpq(threaded_gateway, "queues", q, "--wide")
    assert res.exit_code == 0 and "dedup window" in res.stdout and "0 ms" in res.stdout, res.stdout


def test_create_queue_conflict_and_delete(threaded_gateway: ThreadedGateway, q: str) -> None:
    assert vpq(threaded_gateway, "create-queue", q, "--virtual-partitions", "16").exit_code == 0
    res = vpq(threaded_gateway, "create-queue", q, "--virtual-partitions", "4")
    assert res.exit_code == 1 and "may only grow" in res.stderr and "409" in res.stderr
    assert vpq(threaded_gateway, "delete-queue", q, input="n\n").exit_code == 1
    res = vpq(threaded_gateway, "delete-queue", q, "--yes")
    assert res.exit_code == 0 and f"deleted {q}" in res.stdout
    with Client(threaded_gateway.platform.url) as c:
        assert q not in [x["name"] for x in c.list_queues()]


def test_groups_members_and_lag(threaded_gateway: ThreadedGateway, q: str) -> None:
    seed(threaded_gateway, q)
    vpq(threaded_gateway, "produce", q, "9", "--lane", "feat-a")
    with Client(threaded_gateway.platform.url) as c:
        c.join(q, "g", consumer_id="c-blue", lane="feat-a")  # the feat-a message is its lane's
        vpq(threaded_gateway, "consume", q, "-g", "g", "--max", "1", "--wait-ms", WAIT)
        res = vpq(threaded_gateway, "groups", q, "g")
        assert res.exit_code == 0, res.output
        out = res.stdout
        assert "members (1)" in out and "c-blue" in out and "feat-a" in out
        assert "lag" in out and "(backbone)" in out and "total" in out
        lag = orjson.loads(vpq(threaded_gateway, "groups", q, "g", "--json").stdout)["lag"]
        c.leave(q, "g", "c-blue")
    assert lag["total"] == 3 and lag["by_lane"] == {"": 2, "feat-a": 1}


def test_cluster_tables_and_map(threaded_gateway: ThreadedGateway, q: str) -> None:
    seed(threaded_gateway, q)
    res = vpq(threaded_gateway, "cluster", "--map")
    assert res.exit_code == 0, res.output
    out = res.stdout
    epoch = orjson.loads(vpq(threaded_gateway, "cluster", "--json").stdout)["epoch"]
    for text in ("write nodes (1)", "read nodes (1)", "physical partitions (4)", "w0", "r0", "epoch", f"map epoch {epoch}", q):
        assert text in out, text


def test_gateway_down_says_so_and_exits_1(dead_url: str) -> None:
    for args in (("cluster",), ("queues",), ("produce", "q", "1"), ("consume", "q"), ("groups", "q", "g")):
        res = vpq(dead_url, *args)
        assert res.exit_code == 1, args
        assert f"the gateway is not running at {dead_url}" in res.stderr
        assert "Traceback" not in res.output


def test_delete_group_and_redrive(threaded_gateway: ThreadedGateway, q: str) -> None:
    assert vpq(threaded_gateway, "create-queue", q, "--virtual-partitions", "1", "--max-deliveries", "1",
               "--visibility-timeout-ms", "100").exit_code == 0
    assert vpq(threaded_gateway, "produce", q, "1", "2").exit_code == 0
    with Client(threaded_gateway.platform.url) as c:
        cid = c.join(q, "g").consumer_id
        assert len(c.poll(q, "g", cid, max_messages=10, wait_ms=2000)) == 2  # never acked: dead letters
        deadline = time.monotonic() + 10
        while c.redrive(q, "g", max_messages=1) == 0:  # the SDK: one of them
            assert time.monotonic() < deadline
            time.sleep(0.1)
        while True:  # the CLI: the other one
            res = vpq(threaded_gateway, "redrive", q, "g", "--json")
            assert res.exit_code == 0, res.output
            if orjson.loads(res.stdout)["redriven"]:
                break
            assert time.monotonic() < deadline
            time.sleep(0.1)
        got = []
        while len(got) < 2 and time.monotonic() < deadline:
            got += c.poll(q, "g", cid, max_messages=10, wait_ms=500)
        assert sorted(m.value for m in got) == [1, 2]  # keyless: no order between them
        assert all(m.delivery_count == 1 and m.headers["x-redriven-from"] == f"{q}.g.dlq" for m in got)
        # acked, they cannot expire (100 ms) back into the dead letters before the next redrive
        assert c.ack(q, "g", cid, [m.id for m in got]) == 2
        assert "redrove 0 message(s)" in vpq(threaded_gateway, "redrive", q, "g").stdout
        assert vpq(threaded_gateway, "delete-group", q, "g", input="n\n").exit_code == 1
        res = vpq(threaded_gateway, "delete-group", q, "g", "--yes")
        assert res.exit_code == 0 and f"deleted group g of {q}" in res.stdout
        res = vpq(threaded_gateway, "delete-group", q, "g", "--yes")
        assert res.exit_code == 1 and "group_not_found" in res.stderr
        c.join(q, "g2")
        c.delete_group(q, "g2")
        res = vpq(threaded_gateway, "groups", q, "g2")
        assert res.exit_code == 1 and "group_not_found" in res.stderr
