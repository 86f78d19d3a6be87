"""``gateway.produce_fast``: a plain body takes the short path and gives exactly what the
pydantic models give; anything else goes to the models (and their errors)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gateway.handlers_produce import plain_batch, resolve_message
from gateway.models import MAX_BATCH_MESSAGES, ProduceRequest
from gateway.produce_fast import plain_messages
from isolation.context import IsolationContext, PartialContext

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
anything = json_values | st.just({"x": 1}) | st.integers()
fields = st.sampled_from(["key", "value", "headers", "value_b64", "lane", "env", "set", "other"])
messages = st.dictionaries(
    fields,
    st.one_of(
        json_values,
        st.dictionaries(st.text(max_size=4), st.text(max_size=4) | st.integers(), max_size=2),
        st.just("aGk="),
        st.just("feat-a"),
    ),
    max_size=4,
) | st.builds(lambda k, v: {"key": k, "value": v}, st.none() | st.text(max_size=8), json_values) | anything
plain_message = st.fixed_dictionaries(
    {"value": json_values},
    optional={"key": st.none() | st.text(max_size=8), "headers": st.dictionaries(st.text(max_size=4), st.text(max_size=4))},
)
plain_bodies = st.builds(lambda ms: {"messages": ms}, st.lists(plain_message, min_size=1, max_size=4))
bodies = plain_bodies | st.builds(lambda ms: {"messages": ms}, st.lists(messages, max_size=4)) | st.dictionaries(
    st.sampled_from(["messages", "extra"]), st.lists(messages, max_size=2) | anything, max_size=2
)


def by_models(body: dict[str, Any], headers: PartialContext) -> list[Any] | None:
    try:
        batch = ProduceRequest.model_validate(body)
    except ValidationError:
        return None
    cache: dict[Any, IsolationContext] = {}
    return [resolve_message(i, m, headers, cache) for i, m in enumerate(batch.messages)]


@settings(max_examples=400, deadline=None)
@given(bodies, st.sampled_from([PartialContext(), PartialContext(env="test", lane="feat-a")]))
def test_the_short_path_gives_what_the_models_give(body: dict[str, Any], headers: PartialContext) -> None:
    fast = plain_batch(body, headers)
    if fast is None:
        return
    assert fast == by_models(body, headers)


@settings(max_examples=100, deadline=None)
@given(plain_bodies)
def test_every_plain_body_takes_the_short_path(body: dict[str, Any]) -> None:
    assert plain_batch(body, PartialContext()) is not None


def test_plain_bodies_take_the_short_path_and_others_do_not() -> None:
    plain = {"messages": [{"key": "k", "value": {"a": 1}, "headers": {"h": "v"}}, {"value": None}, {"key": None, "value": 3}]}
    assert plain_messages(plain) == [("k", {"a": 1}, {"h": "v"}), (None, None, {}), (None, 3, {})]
    for body in (
        {"messages": []},
        {"messages": [{"value": 1}] * (MAX_BATCH_MESSAGES + 1)},
        {"messages": [{"value": 1}], "extra": 1},
        {"messages": [{"value_b64": "aGk="}]},
        {"messages": [{"value": 1, "lane": "feat-a"}]},
        {"messages": [{"value": 1, "key": 5}]},
        {"messages": [{"value": 1, "headers": None}]},
        {"messages": [{"value": 1, "headers": {"h": 1}}]},
        {"messages": [{"key": "k"}]},
        {"messages": ["nope"]},
        {"messages": {"value": 1}},
    ):
        assert plain_messages(body) is None, body
