"""``LineageOrder.plain_vps``: the vps it names are ones ``check`` ingests every record
of (in that pp, from that offset on), whatever the lineage (a property test)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from vpq.metadata.maps import LineageRange
from vpq.read_nodes.lineage_order import Decision, LineageOrder

ranges = st.lists(
    st.tuples(st.integers(0, 2), st.integers(0, 50), st.one_of(st.none(), st.integers(0, 60))), max_size=3
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(0, 7), ranges, max_size=8), st.integers(0, 2), st.integers(0, 60))
def test_plain_vps_are_ingested_by_check(lineage: dict, pp: int, start: int) -> None:  # type: ignore[type-arg]
    order = LineageOrder({vp: [LineageRange(*r) for r in rs] for vp, rs in lineage.items()})
    for v in (4, 8):
        plain = order.plain_vps(pp, v, start)
        assert plain == order.plain_vps(pp, v, start)  # cached
        for vp in plain:
            for offset in range(start, start + 40):
                assert order.check(vp, v, pp, offset, lambda _pp: 0) is Decision.INGEST


def test_a_single_open_range_per_vp_makes_its_vps_plain_from_its_start() -> None:
    order = LineageOrder(
        {
            0: [LineageRange(0, 10, None)],
            1: [LineageRange(1, 0, None)],
            2: [LineageRange(1, 0, 5), LineageRange(0, 7, None)],  # moved from pp 1 to pp 0: check decides
        }
    )
    assert order.plain_vps(0, 4, 10) == {0}
    assert order.plain_vps(0, 4, 9) == frozenset()  # below vp 0's start: ask check
    assert order.plain_vps(1, 4, 0) == {1, 3}  # vp 3 follows its ancestor vp 1
    assert LineageOrder({}).plain_vps(0, 4, 0) == {0, 1, 2, 3}  # no lineage: all
