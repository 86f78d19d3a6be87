"""``PlacementGuard.check``: every (queue id, vp) of a batch's summary against the cached map."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from vpq.common.errors import Unavailable
from vpq.write_nodes.handlers import PlacementGuard


@dataclass
class _Rec:
    name: str


@dataclass
class _Entry:
    virtual_partitions: int
    placement: tuple[int, ...] | None


class _Cache:
    """The two lookups the guard makes of a ``MapCache``."""

    epoch = 7

    def __init__(self, queues: dict[int, tuple[str, tuple[int, ...] | None]]) -> None:
        self._recs = {qid: _Rec(name) for qid, (name, _) in queues.items()}
        self._entries = {name: _Entry(len(p) if p else 0, p) for name, p in queues.values()}

    def queue_by_id(self, qid: int) -> _Rec | None:
        return self._recs.get(qid)

    def entry(self, name: str) -> _Entry | None:
        return self._entries.get(name)


GUARD = PlacementGuard(_Cache({1: ("a", (0, 1, 0, 1)), 2: ("b", (0, 0)), 3: ("c", None)}))  # type: ignore[arg-type]


def test_summary_keys_all_on_the_partition_answer_names_and_v() -> None:
    keys = [(1, 0, 0), (1, 2, 5), (2, 1, 0), (1, 0, 3)]
    assert GUARD.check(0, keys) == {1: ("a", 4), 2: ("b", 2)}
    assert GUARD.check(0, [(1, 2)]) == {1: ("a", 4)}  # (queue id, vp) pairs work too


@pytest.mark.parametrize(
    ("keys", "why"),
    [
        ([(1, 0, 0), (1, 1, 0)], "queue 'a' vp 1 is on partition 1, not 0"),  # a later vp of a queue seen before
        ([(2, 0, 0), (2, 2, 0)], "queue 'b' vp 2 is out of range (V=2)"),
        ([(9, 0, 0)], "queue id 9 is unknown"),
        ([(3, 0, 0)], "queue 'c' is not placed"),
    ],
)
def test_any_key_elsewhere_is_a_stale_map(keys: list[tuple[int, int, int]], why: str) -> None:
    with pytest.raises(Unavailable) as err:
        GUARD.check(0, keys)
    assert err.value.code == "stale_map" and why in str(err.value) and "map epoch 7" in str(err.value)
