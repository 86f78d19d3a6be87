from __future__ import annotations

import base64

import orjson
import pytest

from vpq.sdk.models import Message, ProduceMessage, dump_message, encode_message, produce_body


def test_encode_message_json_and_bytes_values() -> None:
    assert encode_message(ProduceMessage(value={"a": 1}, key="k", lane="feat-a")) == {
        "key": "k",
        "value": {"a": 1},
        "lane": "feat-a",
    }
    enc = encode_message(ProduceMessage(value=b"\x00\xff", headers={"h": "v"}, env="test", set=""))
    assert enc == {"value_b64": base64.b64encode(b"\x00\xff").decode(), "headers": {"h": "v"}, "env": "test", "set": ""}
    # a mapping in the API shape passes through; bytes values become value_b64
    assert encode_message({"key": "x", "value": b"hi"}) == {"key": "x", "value_b64": "aGk="}
    assert encode_message({"value": None}) == {"value": None}


def test_dump_message_rejects_values_json_cannot_hold() -> None:
    with pytest.raises(TypeError):
        dump_message(ProduceMessage(value={1, 2}))


def test_produce_body_is_the_api_shape() -> None:
    body = produce_body([dump_message(ProduceMessage(value=1)), dump_message(ProduceMessage(value="x", key="k"))])
    assert orjson.loads(body) == {"messages": [{"value": 1}, {"key": "k", "value": "x"}]}
    assert orjson.loads(produce_body([])) == {"messages": []}


def test_a_server_shaped_message_is_the_same_as_one_read_field_by_field() -> None:
    data = {
        "id": "3-9", "queue": "q", "key": None, "value": {"a": 1}, "headers": {"h": "v"}, "lane": "",
        "env": "prod", "set": "", "partition": 3, "offset": 9, "virtual_partition": 1,
        "timestamp_ms": 5, "delivery_count": 1,
    }  # fmt: skip
    taken = Message.from_json(data)
    read = Message.from_json({**data, "key_b64": "AA=="})  # another shape: field by field
    assert taken == read and vars(taken) == vars(read) == data
    data["headers"]["h"] = "changed"
    data["offset"] = 10
    assert taken.headers == {"h": "v"} and taken.offset == 9  # nothing shared with the caller's object
    assert Message.from_json({**data, "env": ""}).env == "prod"


def test_message_round_trip_json_and_bytes() -> None:
    data = {
        "id": "m1", "queue": "q", "key": "k", "value": [1, 2], "headers": {"h": "v"}, "lane": "l",
        "env": "test", "set": "s1", "partition": 2, "offset": 9, "virtual_partition": 5,
        "timestamp_ms": 123, "delivery_count": 2,
    }
    msg = Message.from_json(data)
    assert msg.value == [1, 2] and not msg.is_bytes
    assert msg.to_json() == data
    raw = Message.from_json({"id": "m2", "queue": "q", "value_b64": base64.b64encode(b"\x01").decode()})
    assert raw.value == b"\x01" and raw.is_bytes
    assert raw.env == "prod" and raw.lane == "" and raw.key is None
    assert raw.to_json()["value_b64"] == "AQ=="


def test_from_wire_is_from_json_of_each_and_takes_the_objects_over() -> None:
    wire = {
        "id": "3-9", "queue": "q", "key": "k", "value": "v", "headers": {}, "lane": "", "env": "prod", "set": "",
        "partition": 3, "offset": 9, "virtual_partition": 1, "timestamp_ms": 5, "delivery_count": 1,
    }  # fmt: skip
    shapes = [
        wire,
        {**wire, "headers": {"h": "v"}},
        {**wire, "env": ""},  # the default env
        {**wire, "headers": None},
        {**wire, "key_b64": "AA=="},  # an extra field
        {k: v for k, v in wire.items() if k != "value"} | {"value_b64": "AQ=="},
        {"id": "m", "queue": "q", "value": 1},  # fields missing
    ]
    items = [orjson.loads(orjson.dumps(s)) for s in shapes]
    expected = [Message.from_json(orjson.loads(orjson.dumps(s))) for s in shapes]
    got = Message.from_wire(items)
    assert got == expected and [vars(m) for m in got] == [vars(m) for m in expected]
    assert vars(got[0]) is items[0]  # the API's exact shape: no copy
    assert got[3].headers == {} and got[4].key == "k" and got[5].value == b"\x01"
