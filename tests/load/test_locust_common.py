"""Pure helpers of the locust files: options, contexts, produce request bodies."""

from __future__ import annotations

import random

import orjson
import pytest

from vpq.load.locust_common import LoadOptions, parse_list, produce_request
from vpq.load.payload import parse_payload


def test_parse_list_keeps_the_backbone_lane() -> None:
    assert parse_list(",lane-a, lane-b") == ["", "lane-a", "lane-b"]
    assert parse_list("") == [""]


def test_produce_request_shape() -> None:
    opts = LoadOptions(queues=3, batch=4, message_bytes=256, keys=5, lanes=("", "feat-x"), envs=("test",))
    queue, body, headers = produce_request(opts, random.Random(7))
    assert queue in opts.queue_names()
    messages = orjson.loads(body)["messages"]
    assert len(messages) == 4
    for m in messages:
        assert len(m["value"]) == 256 and m["key"].startswith("k")
        assert parse_payload(m["value"]).key == m["key"]
    assert headers["X-Lane"] in ("", "feat-x") and headers["X-Env"] == "test"
    assert headers["Content-Type"] == "application/json"


def test_consumer_contexts_cover_every_combination() -> None:
    opts = LoadOptions(lanes=("", "a"), envs=("prod", "test"))
    seen = {opts.context(i) for i in range(4)}
    assert seen == {("", "prod"), ("a", "prod"), ("", "test"), ("a", "test")}
    assert opts.context(4) == opts.context(0)


def test_invalid_options() -> None:
    with pytest.raises(ValueError):
        LoadOptions(batch=0)
    with pytest.raises(ValueError):
        LoadOptions(envs=())
