"""The routing rule: env strictness, lane fallback, set fallback, combined cases,
set_fallback=False, and the cached Router agreeing with the pure function."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.isolation.context import IsolationContext
from vpq.isolation.routing import Router, route


def ctx(token: str) -> IsolationContext:
    return IsolationContext.from_token(token)


# (message context, live consumer contexts, set_fallback, expected receiver or None)
TABLE: list[tuple[str, list[str], bool, str | None]] = [
    # plain backbone
    ("prod//", ["prod//"], True, "prod//"),
    ("prod//", [], True, None),
    # lane: own lane while live, else the backbone
    ("prod//a", ["prod//", "prod//a"], True, "prod//a"),
    ("prod//a", ["prod//"], True, "prod//"),
    ("prod//a", ["prod//b"], True, None),
    ("prod//", ["prod//a"], True, None),  # lane consumers never get backbone messages
    # env is strict: never crossed, even with fallbacks
    ("test//", ["prod//"], True, None),
    ("test//a", ["prod//a", "prod//"], True, None),
    ("test//a", ["test//", "prod//a"], True, "test//"),
    ("prod//", ["test//", "dev//"], True, None),
    # set: own set while live, else the default set
    ("prod/eu/", ["prod/eu/", "prod//"], True, "prod/eu/"),
    ("prod/eu/", ["prod//"], True, "prod//"),
    ("prod/eu/", ["prod/us/"], True, None),
    ("prod//", ["prod/eu/"], True, None),  # set consumers never get default-set messages
    # set_fallback=False: a set message waits for its own set
    ("prod/eu/", ["prod//"], False, None),
    ("prod/eu/", ["prod/eu/"], False, "prod/eu/"),
    ("prod//", ["prod//"], False, "prod//"),
    ("prod/eu/a", ["prod//a"], False, None),
    # combined: set first, then lane within the chosen set
    ("prod/eu/a", ["prod/eu/a", "prod/eu/", "prod//a", "prod//"], True, "prod/eu/a"),
    ("prod/eu/a", ["prod/eu/", "prod//a"], True, "prod/eu/"),
    ("prod/eu/a", ["prod//a", "prod//"], True, "prod//a"),
    ("prod/eu/a", ["prod//"], True, "prod//"),
    # set eu is live but can take neither lane a nor backbone -> not eligible -> default set
    ("prod/eu/a", ["prod/eu/b", "prod//"], True, "prod//"),
    ("prod/eu/a", ["prod/eu/b", "prod//"], False, None),
    ("prod/eu/a", ["prod/eu/b", "prod//b"], True, None),
    ("test/eu/a", ["test/eu/", "test//a", "prod/eu/a"], True, "test/eu/"),
]


@pytest.mark.parametrize("msg,live,fallback,expected", TABLE)
def test_routing_table(msg: str, live: list[str], fallback: bool, expected: str | None) -> None:
    live_ctx = [ctx(t) for t in live]
    want = None if expected is None else ctx(expected)
    assert route(ctx(msg), live_ctx, set_fallback=fallback) == want
    router = Router(live_ctx, set_fallback=fallback)
    assert router.route(ctx(msg)) == want
    assert router.route(ctx(msg)) == want  # cached path
    if want is not None:
        assert router.receives(want, ctx(msg))


contexts = st.builds(
    IsolationContext, st.sampled_from(["prod", "test"]), st.sampled_from(["", "eu", "us"]), st.sampled_from(["", "a", "b"])
)


@settings(max_examples=200, deadline=None)
@given(contexts, st.frozensets(contexts, max_size=8), st.booleans())
def test_rule_invariants(msg: IsolationContext, live: frozenset[IsolationContext], fallback: bool) -> None:
    got = route(msg, live, fallback)
    assert Router(live, fallback).route(msg) == got
    if got is None:
        # nobody who could legally take it is live
        assert msg not in live
        assert IsolationContext(msg.env, msg.set, "") not in live
        if fallback:
            assert IsolationContext(msg.env, "", msg.lane) not in live
            assert IsolationContext(msg.env, "", "") not in live
        return
    assert got in live
    assert got.env == msg.env, "env never crossed"
    assert got.lane in (msg.lane, ""), "only own lane or the backbone"
    assert got.set in (msg.set, ""), "only own set or the default set"
    if not fallback:
        assert got.set == msg.set
    if msg in live:
        assert got == msg, "an exact match always wins"
    if got.lane == "" and msg.lane != "":
        assert IsolationContext(msg.env, got.set, msg.lane) not in live
    if got.set == "" and msg.set != "":
        assert IsolationContext(msg.env, msg.set, msg.lane) not in live
        assert IsolationContext(msg.env, msg.set, "") not in live


def test_router_table_and_properties() -> None:
    live = [ctx("prod//"), ctx("prod//a")]
    r = Router(live)
    assert r.live == frozenset(live) and r.set_fallback
    msgs = [ctx("prod//a"), ctx("prod//b"), ctx("test//")]
    assert r.table(msgs) == {msgs[0]: ctx("prod//a"), msgs[1]: ctx("prod//"), msgs[2]: None}
    assert not r.receives(ctx("prod//a"), ctx("prod//b"))


def test_live_contexts_must_be_isolation_contexts() -> None:
    with pytest.raises(TypeError):
        Router([("prod", "", "")])  # type: ignore[list-item]
