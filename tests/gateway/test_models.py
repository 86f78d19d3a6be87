"""Request models and the pure validation helpers (no server)."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from vpq.codec.message_id import MAX_OFFSET, MAX_PP, MessageIdError, decode_message_id
from vpq.gateway.handlers_produce import batch_error, resolve_message
from vpq.gateway.http import field_path
from vpq.gateway.models import (
    MESSAGE_ID_PATTERN,
    NAME_PATTERN,
    AckRequest,
    JoinRequest,
    NackRequest,
    PollRequest,
    ProduceMessage,
    ProduceRequest,
    QueueConfigRequest,
    decimal_at_most,
    is_valid_name,
)
from vpq.isolation.context import IsolationContext, PartialContext
from vpq.produce_path.outgoing import OutgoingBatch

NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=140))
def test_is_valid_name_agrees_with_the_contract(name: str) -> None:
    assert is_valid_name(name) == (NAME.fullmatch(name) is not None and name not in (".", ".."))


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"[A-Za-z0-9._-]{1,128}", fullmatch=True) | st.from_regex(r"\.{1,4}[a-z.]{0,2}", fullmatch=True))
def test_names_are_the_contract_but_dot_segments(name: str) -> None:
    valid = name not in (".", "..")
    assert is_valid_name(name) == valid
    assert (re.fullmatch(NAME_PATTERN, name) is not None) == valid  # the OpenAPI pattern
    if valid:
        assert JoinRequest.model_validate({"consumer_id": name}).consumer_id == name
    else:
        with pytest.raises(ValidationError):
            JoinRequest.model_validate({"consumer_id": name})


def test_poll_defaults_and_limits() -> None:
    p = PollRequest.model_validate({})
    assert (p.max_messages, p.wait_ms) == (100, 0)
    assert PollRequest.model_validate({"max_messages": 1000, "wait_ms": 30000}).max_messages == 1000
    for bad in ({"max_messages": 0}, {"max_messages": 1001}, {"wait_ms": -1}, {"wait_ms": 30001}, {"max_messages": 1.5}):
        with pytest.raises(ValidationError):
            PollRequest.model_validate(bad)


def test_join_defaults() -> None:
    j = JoinRequest.model_validate({})
    assert (j.consumer_id, j.lane, j.env, j.set_, j.start) == (None, None, None, None, "earliest")
    with pytest.raises(ValidationError):
        JoinRequest.model_validate({"start": "middle"})


def test_ack_and_nack() -> None:
    assert AckRequest.model_validate({"ids": []}).ids == []
    assert NackRequest.model_validate({"ids": ["0-1"]}).delay_ms == 0
    assert NackRequest.model_validate({"ids": ["0-1"], "delay_ms": 250.0}).delay_ms == 250
    for bad in ({}, {"ids": "a"}, {"ids": [""]}, {"ids": ["x" * 257]}, {"ids": [1]}, {"ids": ["a"]}, {"ids": ["1-02"]}):
        with pytest.raises(ValidationError):
            AckRequest.model_validate(bad)
    for bad_nack in ({"ids": ["0-1"], "delay_ms": -1}, {"ids": ["0-1"], "delay_ms": 1.5}, {"ids": ["0-1"], "delay_ms": True}):
        with pytest.raises(ValidationError):
            NackRequest.model_validate(bad_nack)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, MAX_PP * 2), st.integers(0, MAX_OFFSET * 2))
def test_message_id_pattern_is_exactly_what_the_read_nodes_decode(pp: int, offset: int) -> None:
    mid = f"{pp}-{offset}"
    in_range = pp <= MAX_PP and offset <= MAX_OFFSET
    assert (re.fullmatch(MESSAGE_ID_PATTERN, mid) is not None) == in_range
    if in_range:
        assert decode_message_id(mid) == (pp, offset)
        assert AckRequest.model_validate({"ids": [mid]}).ids == [mid]
    else:
        with pytest.raises(ValidationError):
            AckRequest.model_validate({"ids": [mid]})


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789-+ x", max_size=24))
def test_message_id_pattern_rejects_what_decoding_rejects(mid: str) -> None:
    try:
        decode_message_id(mid)
        decodes = True
    except MessageIdError:
        decodes = False
    assert (re.fullmatch(MESSAGE_ID_PATTERN, mid) is not None) == decodes


@pytest.mark.parametrize("limit", [0, 1, 9, 10, 99, 100, 305, 1000, 4096, 65535])
def test_decimal_at_most(limit: int) -> None:
    pattern = re.compile(decimal_at_most(limit))
    for n in range(0, limit * 3 + 20):
        assert (pattern.fullmatch(str(n)) is not None) == (n <= limit), n
    assert pattern.fullmatch("00") is None and pattern.fullmatch("-1") is None


@pytest.mark.parametrize(
    ("model", "field", "value"),
    [(PollRequest, "max_messages", 5.0), (PollRequest, "wait_ms", 0.0), (QueueConfigRequest, "virtual_partitions", 32.0),
     (QueueConfigRequest, "retention_ms", -1.0), (QueueConfigRequest, "max_deliveries", 3.0)],
)
def test_integral_json_numbers_are_integers(model: Any, field: str, value: float) -> None:
    """JSON (and JSON Schema's ``integer``) does not tell 5 from 5.0."""
    got = getattr(model.model_validate({field: value}), field)
    assert got == int(value) and type(got) is int
    for bad in (value + 0.5, str(int(value)), True):
        with pytest.raises(ValidationError):
            model.model_validate({field: bad})


@pytest.mark.parametrize("v", [1, 2, 4, 1024, 65536])
def test_power_of_two_accepted(v: int) -> None:
    assert QueueConfigRequest.model_validate({"virtual_partitions": v}).given() == {"virtual_partitions": v}


@pytest.mark.parametrize("v", [0, -4, 3, 6, 1000, 65537, 131072])
def test_not_power_of_two_or_out_of_range_refused(v: int) -> None:
    with pytest.raises(ValidationError):
        QueueConfigRequest.model_validate({"virtual_partitions": v})


def test_value_xor_value_b64() -> None:
    assert ProduceMessage.model_validate({"value": None}).is_json
    m = ProduceMessage.model_validate({"value_b64": base64.b64encode(b"\x00hi").decode()})
    assert not m.is_json and m.payload() == b"\x00hi"
    for bad in ({}, {"value": 1, "value_b64": ""}, {"value_b64": "@@@@"}):
        with pytest.raises(ValidationError):
            ProduceMessage.model_validate(bad)


def test_field_path() -> None:
    assert field_path(("messages", 3, "value_b64")) == "messages[3].value_b64"
    assert field_path(("ids", 0)) == "ids[0]"
    assert field_path(()) == ""


def test_resolve_message_encodes_json_compactly() -> None:
    m = ProduceMessage.model_validate({"value": {"a": [1, 2]}, "key": "k", "headers": {"h": "v"}, "set": "eu"})
    r = resolve_message(0, m, PartialContext(lane="feat-a"))
    assert r.value == b'{"a":[1,2]}' and r.value_is_json
    assert r.context == IsolationContext("prod", "eu", "feat-a")
    assert OutgoingBatch.from_messages([r]).sizes() == [len(b'{"a":[1,2]}') + 1 + 2]  # value + key + header


_good = st.fixed_dictionaries({"value": st.integers()})
_bad = st.sampled_from([{}, {"value": 1, "value_b64": "AA=="}, {"value_b64": "*"}, {"value": 1, "lane": "UP"}, {"value": 1, "x": 1}])


@settings(max_examples=100, deadline=None)
@given(st.lists(_good, min_size=1, max_size=30), st.data())
def test_batch_error_names_the_first_bad_message(good: list[dict[str, Any]], data: st.DataObject) -> None:
    n_bad = data.draw(st.integers(1, 3))
    msgs: list[dict[str, Any]] = list(good)
    positions = sorted(data.draw(st.lists(st.integers(0, len(msgs)), min_size=n_bad, max_size=n_bad)))
    for offset, pos in enumerate(positions):
        msgs.insert(pos + offset, data.draw(_bad))
    first = positions[0]
    with pytest.raises(ValidationError) as info:
        ProduceRequest.model_validate({"messages": msgs})
    err = batch_error(info.value)
    assert err.code == "invalid_message"
    assert err.details["index"] == first
    assert err.details["field"].startswith(f"messages[{first}]")
