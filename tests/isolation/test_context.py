"""Isolation contexts: validation, defaults, header parsing, precedence."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.isolation.context import (
    IsolationContext,
    IsolationError,
    PartialContext,
    parse_isolation_headers,
    resolve,
)


def test_defaults_and_empty_env() -> None:
    assert IsolationContext() == IsolationContext("prod", "", "")
    assert IsolationContext(env="") == IsolationContext()
    c = IsolationContext()
    assert c.is_backbone and c.is_default_set
    assert not IsolationContext(lane="a").is_backbone


def test_hashable_frozen_ordered() -> None:
    a, b = IsolationContext(lane="a"), IsolationContext(lane="a")
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    with pytest.raises(AttributeError):
        a.lane = "b"  # type: ignore[misc]
    assert sorted([IsolationContext(env="test"), IsolationContext()]) == [IsolationContext(), IsolationContext(env="test")]


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"lane": "Feat-A"}, "lane"),
        ({"lane": "a" * 64}, "lane"),
        ({"set": "eu_1"}, "set"),
        ({"env": "prod/x"}, "env"),
        ({"env": 3}, "env"),
        ({"lane": " a"}, "lane"),
    ],
)
def test_validation_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(IsolationError) as e:
        IsolationContext(**kwargs)
    assert e.value.field == field
    assert f"invalid {field}" in str(e.value)
    assert isinstance(e.value, ValueError)


def test_longest_valid_name() -> None:
    assert IsolationContext(lane="a" * 63).lane == "a" * 63


names = st.from_regex(r"[a-z0-9-]{0,63}", fullmatch=True)


@settings(max_examples=100, deadline=None)
@given(names, names, names)
def test_token_round_trip(env: str, set_: str, lane: str) -> None:
    c = IsolationContext(env, set_, lane)
    assert IsolationContext.from_token(c.token()) == c
    assert IsolationContext(**c.to_dict()) == c


def test_token_format_and_errors() -> None:
    assert IsolationContext().token() == "prod//"
    assert IsolationContext("test", "eu-1", "feat-a").token() == "test/eu-1/feat-a"
    for bad in ("prod/", "a/b/c/d", "PROD//"):
        with pytest.raises(IsolationError):
            IsolationContext.from_token(bad)


def test_parse_headers_case_insensitive_and_stripped() -> None:
    p = parse_isolation_headers({"x-lane": " feat-a ", "X-ENV": "test", "Content-Type": "application/json"})
    assert p == PartialContext(env="test", set=None, lane="feat-a")
    assert parse_isolation_headers({}) == PartialContext()


def test_parse_headers_errors() -> None:
    with pytest.raises(IsolationError, match="header X-Set") as e:
        parse_isolation_headers({"X-Set": "EU"})
    assert e.value.field == "set"
    with pytest.raises(IsolationError, match="given twice"):
        parse_isolation_headers({"x-lane": "a", "X-Lane": "b"})
    assert parse_isolation_headers({"x-lane": "a", "X-Lane": "a"}).lane == "a"


def test_parse_headers_multidict() -> None:
    from multidict import CIMultiDict

    h = CIMultiDict([("X-Lane", "a"), ("x-lane", "b")])
    with pytest.raises(IsolationError, match="given twice"):
        parse_isolation_headers(h)
    assert parse_isolation_headers(CIMultiDict([("X-Env", "dev")])).env == "dev"


def test_resolve_precedence() -> None:
    headers = {"X-Lane": "feat-a", "X-Env": "test", "X-Set": "eu"}
    # message fields win
    assert resolve({"lane": "feat-b", "env": "dev", "set": "us"}, headers) == IsolationContext("dev", "us", "feat-b")
    # headers fill what the message does not carry
    assert resolve({"key": "k", "lane": None}, headers) == IsolationContext("test", "eu", "feat-a")
    # an explicit empty lane/set in the message means backbone/default set
    assert resolve({"lane": "", "set": ""}, headers) == IsolationContext("test", "", "")
    # an empty env anywhere means prod
    assert resolve({"env": ""}, headers) == IsolationContext("prod", "eu", "feat-a")
    assert resolve({}, {"X-Env": ""}) == IsolationContext()
    # defaults
    assert resolve({}) == IsolationContext()
    # parsed once per request
    parsed = parse_isolation_headers(headers)
    assert resolve({}, parsed) == resolve({}, headers)
    assert resolve(PartialContext(lane="x"), parsed) == IsolationContext("test", "eu", "x")


def test_resolve_errors_name_message_field() -> None:
    with pytest.raises(IsolationError, match="from message") as e:
        resolve({"lane": "Bad"}, {})
    assert e.value.field == "lane"
    with pytest.raises(IsolationError, match="must be a string"):
        resolve({"env": 5}, {})
