"""``gateway.produce_decode``: a plain body is decoded straight into columns holding
exactly the messages the pydantic models give (values as the same JSON); anything else
goes to the models (and their errors)."""

from __future__ import annotations

import gc
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.common.errors import BadRequest
from vpq.gateway.handlers_produce import model_batch
from vpq.gateway.models import MAX_BATCH_MESSAGES
from vpq.gateway.produce_decode import _DECODER, decode_plain
from vpq.isolation.context import IsolationContext, PartialContext
from vpq.produce_path.outgoing import OutgoingBatch

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
anything = json_values | st.just({"x": 1}) | st.integers(-(2**63), 2**63 - 1)
fields = st.sampled_from(
    ["key", "value", "headers", "value_b64", "lane", "env", "set", "other", "delay_ms", "deliver_at_ms", "priority", "dedup_id"]
)
NOW_MS = 1_800_000_000_000
attributes = {
    "delay_ms": st.integers(-1, 604_800_001),
    "deliver_at_ms": st.sampled_from([0, NOW_MS - 1, NOW_MS, NOW_MS + 1, NOW_MS + 604_800_000, NOW_MS + 604_800_001]),
    "priority": st.integers(-1, 10),
    "dedup_id": st.text(max_size=4) | st.sampled_from(["a", "x" * 128, "x" * 129, "a\n", "é"]),
}
messages = st.dictionaries(
    fields,
    st.one_of(
        json_values,
        st.dictionaries(st.text(max_size=4), st.text(max_size=4) | st.integers(-(2**63), 2**63 - 1), max_size=2),
        st.just("aGk="),
        st.just("feat-a"),
        st.integers(-1, NOW_MS + 10**9),
    ),
    max_size=4,
) | st.builds(lambda k, v: {"key": k, "value": v}, st.none() | st.text(max_size=8), json_values) | anything
isolation = st.none() | st.sampled_from(["", "feat-a", "test", "eu-1"])
plain_message = st.fixed_dictionaries(
    {"value": json_values},
    optional={
        "key": st.none() | st.text(max_size=8),
        "headers": st.dictionaries(st.text(max_size=4), st.text(max_size=4)),
        "lane": isolation,
        "env": isolation,
        "set": isolation,
        **attributes,
    },
)
valid_plain_message = st.fixed_dictionaries(
    {"value": json_values},
    optional={
        "key": st.none() | st.text(max_size=8),
        "headers": st.dictionaries(st.text(max_size=4).filter(lambda k: not k.startswith(":")), st.text(max_size=4)),
        "priority": st.integers(0, 9),
        "dedup_id": st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=8),
        "deliver_at_ms": st.integers(0, NOW_MS + 604_800_000),
    },
)
plain_bodies = st.builds(lambda ms: {"messages": ms}, st.lists(plain_message, min_size=1, max_size=4))
bodies = plain_bodies | st.builds(lambda ms: {"messages": ms}, st.lists(messages, max_size=4)) | st.dictionaries(
    st.sampled_from(["messages", "extra"]), st.lists(messages, max_size=2) | anything, max_size=2
)
HEADERS = st.sampled_from([PartialContext(), PartialContext(env="test", lane="feat-a")])


def by_models(raw: bytes, headers: PartialContext) -> OutgoingBatch | None:
    try:
        return model_batch(raw, headers, NOW_MS)
    except BadRequest:
        return None


def same_messages(a: OutgoingBatch, b: OutgoingBatch) -> bool:
    """Equal keys, headers, contexts and encodings; values equal as JSON."""
    ma, mb = list(a.messages()), list(b.messages())
    return len(ma) == len(mb) and all(
        (x.key, x.headers, x.context, x.value_is_json) == (y.key, y.headers, y.context, y.value_is_json)
        and orjson.loads(x.value) == orjson.loads(y.value)
        for x, y in zip(ma, mb)
    ) and a.sizes() == [s + (len(x.value) - len(y.value)) for s, x, y in zip(b.sizes(), ma, mb)] and (
        a.spread_keys == b.spread_keys
    )


@settings(max_examples=400, deadline=None)
@given(bodies, HEADERS, st.booleans())
def test_the_short_path_gives_what_the_models_give(body: dict[str, Any], headers: PartialContext, pretty: bool) -> None:
    raw = orjson.dumps(body, option=orjson.OPT_INDENT_2 if pretty else 0)
    fast = decode_plain(raw, headers, NOW_MS)
    if fast is None:
        return
    slow = by_models(raw, headers)
    assert slow is not None, "the short path accepted what the models refuse"
    assert same_messages(fast, slow)


@settings(max_examples=100, deadline=None)
@given(st.builds(lambda ms: {"messages": ms}, st.lists(valid_plain_message, min_size=1, max_size=4)))
def test_every_plain_body_takes_the_short_path(body: dict[str, Any]) -> None:
    assert decode_plain(orjson.dumps(body), PartialContext(), NOW_MS) is not None


def test_decoded_messages_are_not_tracked_by_the_collector() -> None:
    body = _DECODER.decode(orjson.dumps({"messages": [{"value": 1, "headers": {"h": "v"}}, {"value": "x"}]}))
    assert not gc.is_tracked(body) and not any(map(gc.is_tracked, body.messages))


def test_attributes_become_reserved_headers_in_front() -> None:
    raw = orjson.dumps({"messages": [
        {"value": 1, "key": "k", "delay_ms": 500, "priority": 7, "dedup_id": "d-1", "headers": {"h": "v"}},
        {"value": 2, "dedup_id": "d-2"},
        {"value": 3, "deliver_at_ms": NOW_MS - 5},
    ]})  # fmt: skip
    for batch in (decode_plain(raw, PartialContext(), NOW_MS), model_batch(raw, PartialContext(), NOW_MS)):
        assert batch is not None
        assert [m.headers for m in batch.messages()] == [
            {":deliver_at": str(NOW_MS + 500), ":priority": "7", ":dedup": "d-1", "h": "v"},
            {":dedup": "d-2"},
            {},  # due already: nothing to store
        ]
        assert batch.spread_keys == [None, b"d-2", None]  # only a keyless message is routed by its dedup id


def test_reserved_header_names_and_clashing_delays_are_400s() -> None:
    for message in (
        {"value": 1, "headers": {":deliver_at": "1"}},
        {"value": 1, "delay_ms": 5, "deliver_at_ms": NOW_MS + 5},
        {"value": 1, "deliver_at_ms": NOW_MS + 604_800_001},
        {"value": 1, "dedup_id": "a\n"},
        {"value": 1, "priority": 10},
    ):
        raw = orjson.dumps({"messages": [message]})
        assert decode_plain(raw, PartialContext(), NOW_MS) is None, message
        assert by_models(raw, PartialContext()) is None, message


def test_values_are_kept_as_sent_and_other_bodies_go_to_the_models() -> None:
    raw = b'{"messages": [{"key": "k", "value": {"a": 1}, "headers": {"h": "v"}}, {"value": null}, {"key": null, "value": 3}]}'
    batch = decode_plain(raw, PartialContext())
    assert batch is not None
    assert [bytes(v) for v in batch.values] == [b'{"a": 1}', b"null", b"3"]
    assert batch.keys == [b"k", None, None] and batch.encodings == b"\x00\x00\x00"
    assert batch.context == IsolationContext() and batch.contexts is None
    assert [m.headers for m in batch.messages()] == [{"h": "v"}, {}, {}]
    assert batch.sizes() == [1 + 8 + 2, 4, 1]
    for body in (
        {"messages": []},
        {"messages": [{"value": 1}] * (MAX_BATCH_MESSAGES + 1)},
        {"messages": [{"value": 1}], "extra": 1},
        {"messages": [{"value_b64": "aGk="}]},
        {"messages": [{"value": 1, "lane": "UP"}]},
        {"messages": [{"value": 1, "env": 5}]},
        {"messages": [{"value": 1, "set": "x" * 64}]},
        {"messages": [{"value": 1, "key": 5}]},
        {"messages": [{"value": 1, "headers": None}]},
        {"messages": [{"value": 1, "headers": {"h": 1}}]},
        {"messages": [{"key": "k"}]},
        {"messages": ["nope"]},
        {"messages": {"value": 1}},
    ):
        assert decode_plain(orjson.dumps(body), PartialContext()) is None, body
    for raw in (b"", b"{", b"[1]", b'{"messages": [{"value": 1}]} x', b'{"messages": [{"value": 01}]}'):
        assert decode_plain(raw, PartialContext()) is None, raw


TOKENS = [
    b"1", b"0", b"-", b".", b"5", b"e", b"E", b"+", b"400", b"1e400", b"9" * 320, b'"', b"\\", b"u", b"d800", b"\\ud800",
    b"\xff", b"\xed\xa0\x80", b"\xc3\xa9", b"\x01", b"a", b"[", b"]", b"{", b"}", b":", b",", b"true", b"null", b"NaN", b" ",
]  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), min_size=1, max_size=12))
def test_the_short_path_accepts_no_value_orjson_refuses(tokens: list[bytes]) -> None:
    value = b"".join(tokens)
    raw = b'{"messages": [{"key": "k", "value": ' + value + b"}]}"
    if decode_plain(raw, PartialContext()) is not None:
        orjson.loads(raw)  # raises if the short path let through what the rest of the platform cannot parse


def test_values_beyond_a_double_and_bad_utf8_go_to_the_models() -> None:
    for value in (b"1e400", b"-1E400", b"1" + b"0" * 400, b'{"a": [1e999]}', b'"\xff"', b'"\xed\xa0\x80"', b'["\xff"]'):
        raw = b'{"messages": [{"value": ' + value + b"}]}"
        assert decode_plain(raw, PartialContext()) is None, value
    ok = decode_plain('{"messages": [{"value": "h\u00e9", "key": "cl\u00e9"}, {"value": 1.5e308}]}'.encode(), PartialContext())
    assert ok is not None and ok.keys[0] == "cl\u00e9".encode()


def test_isolation_fields_take_the_short_path_and_fall_back_to_the_headers() -> None:
    raw = orjson.dumps({"messages": [{"value": 1, "lane": "feat-a"}, {"value": 2}, {"value": 3, "env": "test", "lane": ""}]})
    batch = decode_plain(raw, PartialContext(env="dev", lane="feat-b"))
    assert batch is not None and batch.context is None
    assert batch.contexts == [
        IsolationContext("dev", "", "feat-a"),
        IsolationContext("dev", "", "feat-b"),
        IsolationContext("test", "", ""),  # a message's own empty lane is the backbone
    ]
    assert same_messages(batch, model_batch(raw, PartialContext(env="dev", lane="feat-b")))
