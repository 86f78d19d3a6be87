"""``produce_path._fast_results``: a produce answer's results JSON in one C call, held
to ``ProduceResults.json_python`` byte for byte; its refusals; and that
``ProduceResults.json`` takes it (strict mode fails when it is not built)."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.needs import missing
from vpq.produce_path import outgoing
from vpq.produce_path.outgoing import ProduceResults

INT64 = st.integers(-(2**63), 2**63 - 1)
COLUMNS = st.integers(0, 40).flatmap(lambda n: st.tuples(*[st.lists(INT64, min_size=n, max_size=n)] * 3))


def fast() -> Callable[[list[int], list[int], list[int]], bytes]:
    if outgoing.results_json is None:
        missing("the C extension vpq.produce_path._fast_results is not built")
    return outgoing.results_json


@settings(max_examples=300, deadline=None)
@given(COLUMNS)
def test_the_same_bytes_as_the_python_loop(columns: tuple[list[int], list[int], list[int]]) -> None:
    pps, offsets, vps = columns
    want = ProduceResults(pps, offsets, vps).json_python()
    assert fast()(pps, offsets, vps) == want
    assert fast()(tuple(pps), tuple(offsets), tuple(vps)) == want
    assert orjson.loads(want)["results"] == ProduceResults(pps, offsets, vps).dicts()


def test_json_takes_the_c_call() -> None:
    results_json = fast()
    from vpq.produce_path import _fast_results

    assert results_json is _fast_results.results_json
    assert ProduceResults([2, 2], [7, 8], [1, 0]).json() == (
        b'{"results":[{"id":"2-7","partition":2,"offset":7,"virtual_partition":1},'
        b'{"id":"2-8","partition":2,"offset":8,"virtual_partition":0}]}'
    )
    assert ProduceResults([], [], []).json() == b'{"results":[]}'


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (([1], [2, 3], [4]), ValueError, "one entry per message"),
        (([1], [2.0], [4]), TypeError, "float"),
        (([1], ["2"], [4]), TypeError, "str"),
        (([1], [2**63], [4]), OverflowError, "int"),
        (([1], [-(2**63) - 1], [4]), OverflowError, "int"),
        (({1}, [2], [4]), TypeError, "lists or tuples"),
        (([1], [2]), TypeError, "results_json"),
    ],
)
def test_refusals(args: tuple[object, ...], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        fast()(*args)  # type: ignore[arg-type]


def test_a_bool_is_an_int_as_for_percent_d() -> None:
    assert fast()([True], [False], [1]) == ProduceResults([True], [False], [1]).json_python()
