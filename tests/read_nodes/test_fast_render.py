"""``MessageRenderer.render_many`` (the C extension ``_fast_render`` with the Python
renderer behind it) answers exactly what ``MessageRenderer.render`` answers, message by
message, for every kind of record; the extension is built (a failure under
``VPQ_TEST_STRICT``)."""

from __future__ import annotations

import importlib

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.needs import missing
from vpq.codec.batch_common import VALUE_JSON, VALUE_RAW
from vpq.isolation.context import IsolationContext
from vpq.read_nodes import messages
from vpq.read_nodes.messages import MessageRenderer, TailedRecord


def _fast() -> object:
    try:
        return importlib.import_module("vpq.read_nodes._fast_render")
    except ImportError:
        missing("the C extension vpq.read_nodes._fast_render is not built (pip install -e . with a C compiler)")


def _rec(
    value: bytes, *, key: bytes | None = b"k", enc: int = VALUE_JSON, headers: tuple = (), ts: int | None = 5,
    ctx: IsolationContext | None = None, pp: int = 2, offset: int = 9,
) -> TailedRecord:
    ctx = ctx or IsolationContext("prod", "", "")
    return TailedRecord(pp, ctx, offset, key, value, headers, ts, enc, 1, 0, 77, 3)


_CONTEXTS = [IsolationContext("prod", "", ""), IsolationContext("test", "eu-1", "feat-a"), IsolationContext("prod", "", "l")]
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=10,
).map(orjson.dumps)
_odd = [b"", b"{", b"[1,]", b"nul", b"\"\xff\"", b" 1 ", b"1e999", b"123456789012345678901234567890"]
_values = _json_values | st.binary(max_size=40) | st.sampled_from(_odd)
_headers = st.sampled_from([(), ((":dedup", b"d"),), ((":priority", b"1"),), (("h", b"v"),), ((":a", b"1"), ("b", b"\xff")), (("", b""),)])
_records = st.builds(
    _rec,
    _values,
    key=st.none() | st.binary(max_size=6) | st.sampled_from([b"k", b"\xff\xfe", "cl\u00e9".encode()]),
    enc=st.sampled_from([VALUE_JSON, VALUE_JSON, VALUE_RAW, 7]),
    headers=_headers,
    ts=st.none() | st.integers(-(2**63), 2**63 - 1),
    ctx=st.sampled_from(_CONTEXTS),
    pp=st.integers(0, 2**31),
    offset=st.integers(0, 2**63 - 1),
)


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(_records, max_size=12),
    vp=st.integers(0, 2**40),
    count=st.integers(1, 2**63 - 1),
    warm=st.booleans(),
)
def test_render_many_is_render_of_each(records: list[TailedRecord], vp: int, count: int, warm: bool) -> None:
    _fast()
    expected = [MessageRenderer('q"\u00e9').render(r, vp, count) for r in records]
    renderer = MessageRenderer('q"\u00e9')
    if warm:  # keys and contexts already remembered: the C code renders what it can
        renderer.render_many(records, [vp] * len(records), [count] * len(records))
    got = renderer.render_many(records, [vp] * len(records), [count] * len(records))
    assert got == expected
    assert renderer.render_many(records, [vp] * len(records), [count] * len(records)) == expected  # again, warm


def _args(renderer: MessageRenderer, check: object = orjson.loads) -> tuple:
    return (renderer._queue, renderer._keys, renderer._key, renderer._contexts, renderer._context,  # noqa: SLF001
            check, messages.RESERVED_PREFIX)  # fmt: skip


def test_the_c_code_renders_the_usual_message_and_leaves_the_rest() -> None:
    fast = _fast()
    renderer = MessageRenderer("q")
    usual = _rec(b'{"a":1}', headers=((":dedup", b"x"),))
    others = [_rec(b"{bad"), _rec(b"1", enc=VALUE_RAW), _rec(b"1", key=b"\xff"), _rec(b"1", headers=(("h", b"v"),))]
    got = fast.render_many(*_args(renderer), [usual, *others], [3] * 5, [1] * 5)  # type: ignore[attr-defined]
    assert got[0] == MessageRenderer("q").render(usual, 3, 1)
    assert got[1:] == [None] * 4
    with pytest.raises(ValueError):
        fast.render_many(*_args(renderer), [usual], [3, 4], [1])  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        fast.render_many(*_args(renderer)[:6], [usual], [3], [1])  # type: ignore[attr-defined]


def test_keys_and_contexts_met_first_in_a_poll_are_rendered_in_c(monkeypatch: pytest.MonkeyPatch) -> None:
    _fast()
    records = [_rec(b"[%d]" % i, key=b"k%d" % (i % 3), ctx=_CONTEXTS[i % 2], offset=i) for i in range(10)]
    expected = [MessageRenderer("q").render(r, 1, 1) for r in records]
    called = []
    monkeypatch.setattr(MessageRenderer, "render", lambda *a: called.append(a))
    renderer = MessageRenderer("q")
    assert renderer.render_many(records, [1] * 10, [1] * 10) == expected
    assert called == []  # a cold renderer: the C code asked for each new key's and context's JSON
    assert set(renderer._keys) == {b"k0", b"k1", b"k2"} and set(renderer._contexts) == set(_CONTEXTS[:2])  # noqa: SLF001


def test_a_failing_check_other_than_an_exception_propagates() -> None:
    fast = _fast()
    renderer = MessageRenderer("q")

    def interrupted(_value: bytes) -> object:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        deep = b"[" * 300 + b"]" * 300  # valid, but deeper than the C check goes: check() is asked
        fast.render_many(*_args(renderer, interrupted), [_rec(deep)], [0], [1])  # type: ignore[attr-defined]


def _orjson_accepts(data: bytes) -> bool:
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return True


_documents = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text()
    | st.floats(-1e15, 1e15).filter(lambda x: x == 0 or abs(x) > 1e-90),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
).map(orjson.dumps)
_hard = [
    b"", b" ", b"1e400", b"-1e400", b"1e99", b"1.5E-07", b"1e007", b"9" * 201, b"9" * 200, b"-", b"-0", b"01", b"1.",
    b".5", b"+1", b'"\\ud800"', b'"\\ud800\\udc00"', b'"\\udc00"', b'"\xed\xa0\x80"', b'"\xf4\x90\x80\x80"',
    b'"\xe0\x80\x80"', b'"\xc0\xaf"', b'"\xef\xbb\xbf"', b"\xef\xbb\xbf1", b'"\x7f"', b'"\x1f"', b'"\\x"', b'"\\u12"',
    b'{"a":1,"a":2}', b"[" * 300 + b"]" * 300, b"[1,]", b"{,}", b'{"a"}', b'{"a":}', b"[1 2]", b"true false",
    b"nul", b"tru", b"[true]", b"{} ", b"\t[]\n", b'"' + b"a" * 20 + b"\\n" + b"\xc3\xa9" * 9 + b'"',
]  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        _documents,
        st.sampled_from(_hard),
        st.binary(max_size=40),
        st.tuples(_documents, st.integers(0, 200), st.binary(min_size=1, max_size=3)).map(
            lambda t: t[0][: t[1]] + t[2] + t[0][t[1]:]  # a document with bytes put in
        ),
        st.tuples(_documents, st.integers(0, 200)).map(lambda t: t[0][: t[1]] + t[0][t[1] + 1:]),  # a byte taken out
    )
)
def test_json_valid_says_true_only_for_what_orjson_accepts(data: bytes) -> None:
    fast = _fast()
    if fast.json_valid(data):  # type: ignore[attr-defined]
        assert _orjson_accepts(data)


@settings(max_examples=300, deadline=None)
@given(_documents)
def test_json_valid_takes_the_usual_document_itself(data: bytes) -> None:
    """What orjson writes (no number beyond the checked forms) needs no second parse."""
    assert _fast().json_valid(data)  # type: ignore[attr-defined]


def test_json_valid_on_the_hard_cases() -> None:
    fast = _fast()
    verdicts = {case: fast.json_valid(case) for case in _hard}  # type: ignore[attr-defined]
    assert all(_orjson_accepts(case) for case, ok in verdicts.items() if ok)
    assert [case for case, ok in verdicts.items() if ok] == [
        b"1e99", b"1.5E-07", b"9" * 200, b"-0", b'"\xef\xbb\xbf"', b'"\x7f"', b'{"a":1,"a":2}', b"[true]", b"{} ",
        b"\t[]\n", b'"' + b"a" * 20 + b"\\n" + b"\xc3\xa9" * 9 + b'"',
    ]  # fmt: skip
