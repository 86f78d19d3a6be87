"""``queue_admin.log_ends``: end offsets per pp from the write nodes' partition listings."""

from __future__ import annotations

from typing import Any

import pytest

from vpq.node_rpc.node_directory import NodeRef
from vpq.queue_admin.log_ends import LogEnds, parse_ends


def test_parse_ends_keeps_well_formed_online_rows() -> None:
    answer = {"partitions": [
        {"id": 0, "end_offset": 10, "online": True},
        {"id": 1, "end_offset": 5, "online": False},  # not serving: unknown
        {"id": 2, "end_offset": "x"},
        {"id": 3},
        {"id": 4, "end_offset": 0},
        {"id": -1, "end_offset": 3},
    ]}
    assert parse_ends(answer) == {0: 10, 4: 0}
    assert parse_ends({}) == {}


class _Writers:
    def owners(self) -> dict[int, NodeRef | None]:
        return {0: NodeRef("w0", "a:1"), 1: NodeRef("w0", "a:1"), 2: NodeRef("w1", "b:2"), 3: None}


class _Client:
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def partitions(self, address: str) -> dict[str, Any]:
        self.asked.append(address)
        if address == "b:2":
            raise OSError("connection refused")
        return {"partitions": [{"id": 0, "end_offset": 42}, {"id": 1, "end_offset": 7}]}


async def test_each_owner_is_asked_once_and_a_silent_one_is_left_out() -> None:
    client = _Client()
    ends = LogEnds(_Writers(), client)  # type: ignore[arg-type]
    assert await ends() == {0: 42, 1: 7}
    assert sorted(client.asked) == ["a:1", "b:2"]


@pytest.mark.parametrize("owners", [{}, {0: None}])
async def test_no_owner_known_means_no_ends(owners: dict[int, Any]) -> None:
    class W:
        def owners(self) -> dict[int, Any]:
            return owners

    assert await LogEnds(W(), _Client())() == {}  # type: ignore[arg-type]
