"""RoutingTable: the inverse of the routing rule, rebuilt on membership changes."""

from __future__ import annotations

from vpq.isolation.context import IsolationContext as Ctx
from vpq.isolation.routing import Router
from vpq.read_nodes.routing_table import RoutingTable

BACKBONE, LANE, TEST = Ctx(), Ctx("prod", "", "a"), Ctx("test")


def test_sources_follow_live_contexts() -> None:
    t = RoutingTable(lambda live: Router(live).route)
    t.add(LANE)
    assert t.route_of(LANE) is None and t.sources(BACKBONE) == []
    t.rebuild([BACKBONE], [LANE, BACKBONE, TEST])
    assert t.sources(BACKBONE) == [LANE, BACKBONE] and t.route_of(TEST) is None
    t.rebuild([BACKBONE, LANE], [LANE, BACKBONE, TEST])
    assert t.sources(BACKBONE) == [BACKBONE] and t.sources(LANE) == [LANE]
    assert t.route_of(Ctx("prod", "", "b")) == BACKBONE  # routed on first sight
    assert t.sources(BACKBONE) == [BACKBONE, Ctx("prod", "", "b")]
